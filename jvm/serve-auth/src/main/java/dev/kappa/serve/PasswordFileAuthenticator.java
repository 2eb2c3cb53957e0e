package dev.kappa.serve;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2 CUSTOM authentication for {@code kappa serve}: checks a user name and password
 * against a password file.
 *
 * <p>Enabled with {@code hive.server2.authentication=CUSTOM} and
 * {@code hive.server2.custom.authentication.class=dev.kappa.serve.PasswordFileAuthenticator}
 * (Hive's "Setting Up HiveServer2", Authentication/Security Configuration). The file is named by
 * the environment variable {@code KAPPA_SERVE_PASSWORD_FILE} (or the system property
 * {@code kappa.serve.password.file}). One {@code user:password} per line; blank lines and lines
 * starting with {@code #} are ignored; the password is everything after the first colon.
 *
 * <p>The file is read again when its modification time or size changes, so a rotated Kubernetes
 * Secret mounted as a volume (the kubelet swaps the file atomically) applies without a restart.
 * Passwords are compared in constant time. An unreadable file refuses every login.
 */
public final class PasswordFileAuthenticator implements PasswdAuthenticationProvider {
  public static final String ENV = "KAPPA_SERVE_PASSWORD_FILE";
  public static final String PROPERTY = "kappa.serve.password.file";

  private static final Object LOCK = new Object();
  private static Path loadedPath;
  private static long loadedMtime = -1;
  private static long loadedSize = -1;
  private static Map<String, byte[]> users = Map.of();

  /** The password file's path, or null when none is configured. */
  static Path passwordFile() {
    String p = System.getProperty(PROPERTY);
    if (p == null || p.isEmpty()) {
      p = System.getenv(ENV);
    }
    return (p == null || p.isEmpty()) ? null : Paths.get(p);
  }

  /** Parse {@code user:password} lines; throws IOException naming the file and line if malformed. */
  static Map<String, byte[]> parse(Path file, List<String> lines) throws IOException {
    Map<String, byte[]> out = new HashMap<>();
    for (int i = 0; i < lines.size(); i++) {
      String line = lines.get(i);
      if (line.isBlank() || line.stripLeading().startsWith("#")) {
        continue;
      }
      int colon = line.indexOf(':');
      if (colon <= 0 || colon == line.length() - 1) {
        throw new IOException(file + ": line " + (i + 1) + " is not `user:password`");
      }
      out.put(line.substring(0, colon), line.substring(colon + 1).getBytes(StandardCharsets.UTF_8));
    }
    if (out.isEmpty()) {
      throw new IOException(file + ": no `user:password` line");
    }
    return out;
  }

  private static Map<String, byte[]> current() throws AuthenticationException {
    Path file = passwordFile();
    if (file == null) {
      throw new AuthenticationException(
          "no password file configured (" + ENV + "): every login is refused");
    }
    synchronized (LOCK) {
      try {
        long mtime = Files.getLastModifiedTime(file).toMillis();
        long size = Files.size(file);
        if (!file.equals(loadedPath) || mtime != loadedMtime || size != loadedSize) {
          users = parse(file, Files.readAllLines(file, StandardCharsets.UTF_8));
          loadedPath = file;
          loadedMtime = mtime;
          loadedSize = size;
        }
        return users;
      } catch (IOException e) {
        throw new AuthenticationException("cannot read the password file: " + e.getMessage(), e);
      }
    }
  }

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    byte[] expected = user == null ? null : current().get(user);
    byte[] given = password == null ? new byte[0] : password.getBytes(StandardCharsets.UTF_8);
    // compare even for an unknown user, so timing does not tell which user names exist
    boolean ok = MessageDigest.isEqual(expected == null ? new byte[given.length + 1] : expected, given);
    if (expected == null || !ok) {
      throw new AuthenticationException("authentication failed for user " + user);
    }
  }
}

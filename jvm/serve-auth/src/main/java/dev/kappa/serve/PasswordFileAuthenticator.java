package dev.kappa.serve;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2 CUSTOM authentication for {@code kappa serve}: checks a user name and password
 * against a password file of salted PBKDF2-HMAC-SHA256 hashes.
 *
 * <p>Enabled with {@code hive.server2.authentication=CUSTOM} and
 * {@code hive.server2.custom.authentication.class=dev.kappa.serve.PasswordFileAuthenticator}
 * (Hive's "Setting Up HiveServer2", Authentication/Security Configuration). The file is named by
 * the environment variable {@code KAPPA_SERVE_PASSWORD_FILE} (or the system property
 * {@code kappa.serve.password.file}). One {@code user:pbkdf2_sha256$<iterations>$<salt>$<hash>}
 * per line (salt and hash in standard base64), optionally followed by {@code :<role>} ({@link #ROLES};
 * none is {@code analyst}, who reads; {@code dbt} may also write dbt's schema, see
 * {@code dev.kappa.serve.ReadOnlySqlGuard} and {@link #role}), as {@code kappa serve user add} writes it
 * ({@code platform/kappa/services/serve_users.py}, which documents the format and its numbers);
 * blank lines and lines starting with {@code #} are ignored. A plain-text {@code user:password}
 * line, or any line not in that form, makes the whole file refused (every login fails, the log
 * names the file and line): failing closed, never guessing.
 *
 * <p>The file is read again when its modification time or size changes, so a rotated Kubernetes
 * Secret mounted as a volume (the kubelet swaps the file atomically) applies without a restart.
 *
 * <p>Timing: an unknown user is checked against a dummy hash with the file's highest iteration
 * count, and hashes are compared with {@link MessageDigest#isEqual} (constant time), so a refusal
 * takes as long whether or not the user exists.
 *
 * <p>Back-off: after {@link #FREE_FAILURES} consecutive failed logins of a user name (known or
 * not, so the lock-out tells nothing about which names exist), the name is locked out for
 * {@link #FIRST_LOCK_MS} ms, doubling with every further failure up to {@link #MAX_LOCK_MS}; during
 * the lock-out every login of that name is refused without checking its password (the right one
 * too, so parallel guessing gains nothing), and such refusals do not lengthen it. A successful
 * login clears the name's failures; failures older than {@link #FORGET_MS} are forgotten; at most
 * {@link #MAX_TRACKED} names are remembered (the least recently seen go first).
 *
 * <p>HiveServer2 makes a new instance per login, so the state is static.
 */
public final class PasswordFileAuthenticator implements PasswdAuthenticationProvider {
  public static final String ENV = "KAPPA_SERVE_PASSWORD_FILE";
  public static final String PROPERTY = "kappa.serve.password.file";

  static final String SCHEME = "pbkdf2_sha256";
  /** The roles a line may give its user; a line without one is the first's. */
  public static final List<String> ROLES = List.of("analyst", "dbt");
  // the bounds of serve_users.py (MIN_ITERATIONS, MAX_ITERATIONS, SALT_BYTES, HASH_BYTES)
  static final int MIN_ITERATIONS = 100_000;
  static final int MAX_ITERATIONS = 10_000_000;
  static final int MIN_SALT_BYTES = 16;
  static final int HASH_BYTES = 32;

  /** Consecutive failures of a name before it is locked out (a few typos are not an attack). */
  public static final int FREE_FAILURES = 5;
  /** The first lock-out, after the {@link #FREE_FAILURES}-th failure; doubled after each further one. */
  public static final long FIRST_LOCK_MS = 2_000;
  /** The longest lock-out: bounds how long anyone can lock a user out by guessing its name. */
  public static final long MAX_LOCK_MS = 300_000;
  /** A name's failures are forgotten this long after its last one. */
  public static final long FORGET_MS = 15 * 60_000;
  /** Names whose failures are remembered at most (bounds memory under a spray of random names). */
  public static final int MAX_TRACKED = 10_000;

  private static final SecureRandom RANDOM = new SecureRandom();
  private static final Object LOCK = new Object();
  private static Path loadedPath;
  private static long loadedMtime = -1;
  private static long loadedSize = -1;
  private static Users users;

  /** One stored hash: PBKDF2-HMAC-SHA256 of the password with {@code salt} over {@code iterations}. */
  record Hash(int iterations, byte[] salt, byte[] hash) {}

  /** The file's users, their roles, and a dummy hash of the file's highest cost (checked for unknown users). */
  record Users(Map<String, Hash> byName, Map<String, String> roles, Hash dummy) {}

  /** The password file's path, or null when none is configured. */
  static Path passwordFile() {
    String p = System.getProperty(PROPERTY);
    if (p == null || p.isEmpty()) {
      p = System.getenv(ENV);
    }
    return (p == null || p.isEmpty()) ? null : Paths.get(p);
  }

  /** Decode {@code pbkdf2_sha256$<iterations>$<salt>$<hash>}; the message says what is wrong. */
  static Hash decode(String text) {
    String[] parts = text.split("\\$", -1);
    if (!parts[0].equals(SCHEME)) {
      throw new IllegalArgumentException(
          "a plain-text password (or an unknown scheme): only salted hashes are accepted");
    }
    if (parts.length != 4) {
      throw new IllegalArgumentException("not " + SCHEME + "$<iterations>$<salt base64>$<hash base64>");
    }
    int iterations;
    try {
      iterations = parts[1].chars().allMatch(Character::isDigit) ? Integer.parseInt(parts[1]) : -1;
    } catch (NumberFormatException e) {
      iterations = -1;
    }
    if (iterations < MIN_ITERATIONS || iterations > MAX_ITERATIONS) {
      throw new IllegalArgumentException("the iteration count is not in [" + MIN_ITERATIONS + ", "
          + MAX_ITERATIONS + "]");
    }
    byte[] salt;
    byte[] hash;
    try {
      salt = Base64.getDecoder().decode(parts[2]);
      hash = Base64.getDecoder().decode(parts[3]);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("the salt or the hash is not base64");
    }
    if (salt.length < MIN_SALT_BYTES) {
      throw new IllegalArgumentException("the salt has " + salt.length + " bytes, fewer than " + MIN_SALT_BYTES);
    }
    if (hash.length != HASH_BYTES) {
      throw new IllegalArgumentException("the hash has " + hash.length + " bytes, not " + HASH_BYTES);
    }
    return new Hash(iterations, salt, hash);
  }

  /** Parse the file's lines; throws IOException naming the file and line if one is not a hash line. */
  static Users parse(Path file, List<String> lines) throws IOException {
    Map<String, Hash> out = new HashMap<>();
    Map<String, String> roles = new HashMap<>();
    Map<String, Integer> lineOf = new HashMap<>();
    int maxIterations = 0;
    for (int i = 0; i < lines.size(); i++) {
      String line = lines.get(i);
      if (line.isBlank() || line.stripLeading().startsWith("#")) {
        continue;
      }
      int colon = line.indexOf(':');
      if (colon <= 0 || colon == line.length() - 1) {
        throw new IOException(file + ": line " + (i + 1) + " is not `user:" + SCHEME + "$…`");
      }
      String user = line.substring(0, colon);
      if (lineOf.containsKey(user)) {
        throw new IOException(file + ": line " + (i + 1) + ": user '" + user + "' is already on line "
            + lineOf.get(user));
      }
      String rest = line.substring(colon + 1);
      int roleColon = rest.indexOf(':');
      String role = roleColon < 0 ? ROLES.get(0) : rest.substring(roleColon + 1);
      if (!ROLES.contains(role)) {
        throw new IOException(file + ": line " + (i + 1) + " (user '" + user + "'): role '" + role
            + "' is not one of " + ROLES);
      }
      try {
        Hash h = decode(roleColon < 0 ? rest : rest.substring(0, roleColon));
        out.put(user, h);
        roles.put(user, role);
        lineOf.put(user, i + 1);
        maxIterations = Math.max(maxIterations, h.iterations());
      } catch (IllegalArgumentException e) {
        throw new IOException(file + ": line " + (i + 1) + " (user '" + user + "'): " + e.getMessage());
      }
    }
    if (out.isEmpty()) {
      throw new IOException(file + ": no `user:" + SCHEME + "$…` line");
    }
    byte[] salt = new byte[MIN_SALT_BYTES];
    byte[] hash = new byte[HASH_BYTES];
    RANDOM.nextBytes(salt);
    RANDOM.nextBytes(hash);  // no password derives to it: an unknown user never logs in
    return new Users(Map.copyOf(out), Map.copyOf(roles), new Hash(maxIterations, salt, hash));
  }

  private static Users current() throws AuthenticationException {
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
          users = null;  // fail closed if this read fails
          users = parse(file, Files.readAllLines(file, StandardCharsets.UTF_8));
          loadedPath = file;
          loadedMtime = mtime;
          loadedSize = size;
        }
        return users;
      } catch (IOException e) {
        loadedPath = null;
        throw new AuthenticationException("cannot use the password file: " + e.getMessage(), e);
      }
    }
  }

  /**
   * The role the password file gives {@code user} ({@link #ROLES}), read from the file as it is now
   * (the one logins are checked against); null for a user not in it or when the file cannot be used.
   */
  public static String role(String user) {
    try {
      return current().roles().get(user);
    } catch (AuthenticationException e) {
      return null;
    }
  }

  /** PBKDF2-HMAC-SHA256 of the password's UTF-8 bytes (what SunJCE derives from the chars). */
  static byte[] derive(String password, Hash h) {
    char[] chars = password == null ? new char[0] : password.toCharArray();
    PBEKeySpec spec = new PBEKeySpec(chars, h.salt(), h.iterations(), h.hash().length * 8);
    try {
      return SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("PBKDF2WithHmacSHA256 is not available", e);
    } finally {
      spec.clearPassword();
      Arrays.fill(chars, '\0');
    }
  }

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String name = user == null ? "" : user;
    Users u = current();
    long lockedMs = Failures.lockedForMs(name, System.nanoTime());
    if (lockedMs > 0) {
      throw new AuthenticationException("user " + name + " is locked out for " + (lockedMs + 999) / 1000
          + " s more after failed logins (password not checked)");
    }
    Hash stored = u.byName().get(name);
    // an unknown user costs the same as a known one: the dummy has the file's highest cost
    byte[] derived = derive(password, stored == null ? u.dummy() : stored);
    boolean ok = MessageDigest.isEqual(derived, stored == null ? u.dummy().hash() : stored.hash());
    if (stored == null || !ok) {
      int failures = Failures.failed(name, System.nanoTime());
      throw new AuthenticationException("authentication failed for user " + name + " (" + failures
          + " consecutive failure" + (failures == 1 ? "" : "s") + ")");
    }
    Failures.succeeded(name);
  }

  /** Consecutive failed logins per user name and the lock-out they earn (see the class comment). */
  static final class Failures {
    /** name -> {consecutive failures, nanoTime of the last one, nanoTime the lock-out ends}. */
    private static final LinkedHashMap<String, long[]> BY_NAME = new LinkedHashMap<>(64, 0.75f, true) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<String, long[]> eldest) {
        return size() > MAX_TRACKED;
      }
    };

    private Failures() {}

    /** The lock-out after {@code failures} consecutive failures, in ms (0: none). */
    static long lockMs(long failures) {
      if (failures < FREE_FAILURES) {
        return 0;
      }
      long doublings = Math.min(failures - FREE_FAILURES, 30);
      return Math.min(FIRST_LOCK_MS << doublings, MAX_LOCK_MS);
    }

    /** Milliseconds the name is still locked out at {@code now} (nanoTime), 0 when it is not. */
    static long lockedForMs(String name, long now) {
      synchronized (BY_NAME) {
        long[] f = BY_NAME.get(name);
        if (f == null) {
          return 0;
        }
        if (now - f[1] > FORGET_MS * 1_000_000L) {
          BY_NAME.remove(name);
          return 0;
        }
        long left = f[2] - now;
        return left <= 0 ? 0 : (left + 999_999) / 1_000_000L;
      }
    }

    /** Record a failure at {@code now}; returns the name's consecutive failures. */
    static int failed(String name, long now) {
      synchronized (BY_NAME) {
        long[] f = BY_NAME.get(name);
        if (f == null || now - f[1] > FORGET_MS * 1_000_000L) {
          f = new long[3];
        }
        f[0] += 1;
        f[1] = now;
        f[2] = now + lockMs(f[0]) * 1_000_000L;
        BY_NAME.put(name, f);
        return (int) Math.min(f[0], Integer.MAX_VALUE);
      }
    }

    static void succeeded(String name) {
      synchronized (BY_NAME) {
        BY_NAME.remove(name);
      }
    }

    /** Forget every name (tests). */
    static void clear() {
      synchronized (BY_NAME) {
        BY_NAME.clear();
      }
    }
  }
}

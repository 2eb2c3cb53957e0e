// Drives dev.kappa.serve.PasswordFileAuthenticator in one JVM, as HiveServer2 would (a new instance per
// login), for tests/unit/test_serve_auth.py: run as a single-file program,
//   java -Dkappa.serve.password.file=FILE -cp kappa-serve-auth.jar:spark-hive-thriftserver.jar CheckLogins.java
// Standard input, one command a line, tab-separated:  login<TAB>user<TAB>password  |  sleep<TAB>ms  |  role<TAB>user
// Standard output, one line per login:  ok <ms>  |  refused <ms> <the exception's message>;
// per role:  role <the user's role, or null>
import dev.kappa.serve.PasswordFileAuthenticator;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

public class CheckLogins {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      String[] f = line.split("\t", -1);
      if (f[0].equals("role")) {
        System.out.println("role " + PasswordFileAuthenticator.role(f[1]));
        continue;
      }
      if (f[0].equals("sleep")) {
        Thread.sleep(Long.parseLong(f[1]));
        continue;
      }
      long t = System.nanoTime();
      String outcome;
      try {
        new PasswordFileAuthenticator().Authenticate(f[1], f[2]);
        outcome = "ok " + (System.nanoTime() - t) / 1_000_000;
      } catch (javax.security.sasl.AuthenticationException e) {
        outcome = "refused " + (System.nanoTime() - t) / 1_000_000 + " " + e.getMessage();
      }
      System.out.println(outcome);
      System.out.flush();
    }
  }
}

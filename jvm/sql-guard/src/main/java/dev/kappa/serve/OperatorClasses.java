package dev.kappa.serve;

import java.io.IOException;
import java.lang.reflect.Modifier;
import java.util.Enumeration;
import java.util.TreeSet;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Lists the logical operators a Spark release ships: every concrete class in the given jars that
 * extends {@link LogicalPlan}, one {@code <command|plan> <class name>} line each, sorted. The test
 * of the guard's operator table ({@code platform/kappa/resources/sql_operators.json}) runs it over
 * pyspark's Spark jars and fails on a class the table does not classify (a Spark upgrade that adds
 * an operator). Usage: {@code java -cp <spark jars>:kappa-sql-guard.jar dev.kappa.serve.OperatorClasses JAR...}.
 */
public final class OperatorClasses {
  private OperatorClasses() {}

  public static void main(String[] jars) throws IOException {
    ClassLoader loader = OperatorClasses.class.getClassLoader();
    TreeSet<String> out = new TreeSet<>();
    int unloadable = 0;
    for (String jar : jars) {
      try (JarFile file = new JarFile(jar)) {
        Enumeration<JarEntry> entries = file.entries();
        while (entries.hasMoreElements()) {
          String entry = entries.nextElement().getName();
          if (!entry.endsWith(".class") || entry.contains("$anon") || entry.contains("$$")) {
            continue;
          }
          String name = entry.substring(0, entry.length() - ".class".length()).replace('/', '.');
          Class<?> cls;
          try {
            cls = Class.forName(name, false, loader);
          } catch (Throwable e) {  // a class whose optional dependencies are absent
            unloadable++;
            continue;
          }
          if (LogicalPlan.class.isAssignableFrom(cls) && !cls.isInterface()
              && !Modifier.isAbstract(cls.getModifiers())) {
            out.add((Command.class.isAssignableFrom(cls) ? "command " : "plan ") + name);
          }
        }
      }
    }
    out.forEach(System.out::println);
    System.err.println(out.size() + " operator classes, " + unloadable + " classes not loadable");
  }
}

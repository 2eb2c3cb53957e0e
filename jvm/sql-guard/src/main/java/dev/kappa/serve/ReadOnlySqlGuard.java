package dev.kappa.serve;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.WeakHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.CurrentUserContext;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.analysis.UnresolvedGenerator;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.catalyst.analysis.ResolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.ResolvedNamespace;
import org.apache.spark.sql.catalyst.analysis.ResolvedPersistentView;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.TableSpecBase;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.connector.catalog.CatalogManager;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.DropTempViewCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.Function1;
import scala.Option;
import scala.runtime.BoxedUnit;

/**
 * The SQL endpoint's statement policy (`kappa serve`): a Spark session extension that admits a
 * statement only if it is on an allow-list. It applies to every session but the endpoint's own
 * (the one that keeps the catalog in step with the registry, marked with {@link #trust}).
 *
 * <p>As parsed ({@link Parser}, before analysis, so before any catalog or table is touched):
 * the session's settings ({@code settings}, below); every function a statement names (scalar,
 * aggregate, window, generator, table-valued) must be on the allow-list of the functions table
 * ({@code spark.kappa.sql.guard.functions}, {@code kappa/resources/sql_functions.json}) and unqualified
 * or {@code builtin}/{@code system.builtin}-qualified ({@code functions}); no path reads
 * ({@code no-path-reads}), no Delta statement ({@code no-delta-commands}), no {@code EXECUTE
 * IMMEDIATE} ({@code no-dynamic-sql}). View bodies are parsed by the same parser when a view is
 * resolved, so they are checked too.
 *
 * <p>As analyzed (a check rule, before a command executes): the plan's operators must be on the
 * operator table ({@code spark.kappa.sql.guard.operators}, {@code kappa/resources/sql_operators.json}):
 * a query only of its {@code query} operators ({@code operators}), reading only tables of the
 * built-in catalog ({@code relations}), with no user-defined function and no expression of a
 * refused function ({@code functions}); a read-only command ({@code read_commands}); a session
 * setting on the allow-list ({@code settings}); a session's own temporary view; or one of the
 * {@code writes}, only by dbt's login ({@code writes-only-for-dbt}: the role {@code dbt} in the
 * password file; with no password file, NONE authentication, every login is the local developer)
 * and only in the writable schema and location ({@code writes-only-in-schema}). Anything else is
 * refused ({@code commands}).
 *
 * <p>{@code settings}: a session whose SQL configuration differs from the server's starting one
 * (its SparkConf and JVM system properties, or what the server's own session holds: Delta sets a few
 * keys in every session) in a key not on {@link #SESSION_SETTINGS} is refused every statement: HiveServer2
 * applies a connection's {@code set:hiveconf:}/{@code set:hivevar:} keys to the session before its
 * first statement, so a client could otherwise register a catalog ({@code spark.sql.catalog.*}),
 * turn path reads or variable substitution back on. {@code SET key=value} of any other key is refused.
 *
 * <p>Every refusal is a {@link Refused} whose message is {@code kappa sql guard: <rule>: <detail>}.
 * All settings of the guard come from the SparkConf (fixed at start), never from a session's SQL
 * conf. Register with {@code spark.sql.extensions=...,dev.kappa.serve.ReadOnlySqlGuard}.
 */
public final class ReadOnlySqlGuard implements Function1<SparkSessionExtensions, BoxedUnit> {

  /** A statement the endpoint refuses; the message names the rule. */
  public static final class Refused extends RuntimeException {
    public Refused(String rule, String detail) {
      super("kappa sql guard: " + rule + ": " + detail);
    }
  }

  private static final Set<Object> TRUSTED = Collections.synchronizedSet(
      Collections.newSetFromMap(new WeakHashMap<>()));

  /** Exempt {@code session} (the endpoint's own catalog session) from the policy. */
  public static void trust(SparkSession session) {
    TRUSTED.add(session);
  }

  /**
   * Session settings a client may change (in its connection or with SET): presentation only.
   * The Thrift server itself sets the Hive version, the Java 8 date API and the binary output style on
   * every session; Delta records the version of a session's last commit; the Hive JDBC driver
   * (beeline) sends its fetch size.
   */
  static final Set<String> SESSION_SETTINGS = Set.of(
      "spark.sql.session.timeZone", "spark.sql.ansi.enabled", "spark.sql.hive.version",
      "spark.sql.datetime.java8API.enabled", "spark.sql.binaryOutputStyle",
      "spark.databricks.delta.lastCommitVersionInSession",
      "hive.server2.thrift.resultset.default.fetch.size");

  /** The role of the password file whose logins may write (dbt's). */
  static final String WRITER_ROLE = "dbt";

  /**
   * Marks every node of a plan the {@link Parser} parsed for a client (a statement, a view body):
   * the analyzer copies tags onto the nodes it derives, so an analyzed query holding a marked node
   * comes from a client's SQL and is checked whole. Queries Spark and Delta build internally on the
   * client's session (Delta reading its log while it resolves a table) hold none: they are not
   * the client's statements, and their operators (DeserializeToObject, path reads of
   * {@code _delta_log}) are not on the query list. Commands are checked whether marked or not (a
   * rule that builds a command afresh drops the mark), and every parsed node was already held to
   * the function and operator tables before analysis.
   */
  static final TreeNodeTag<Boolean> FROM_CLIENT = new TreeNodeTag<>("kappa.sql.guard.client");

  /** Product fields of a write that hold what it reads, not what it writes. */
  private static final Set<String> SOURCES = Set.of("query", "source", "sourceTable", "plan");

  /** The guard's tables, read once from the files the SparkConf names. */
  static final class Tables {
    final Set<String> functions = new HashSet<>();
    final Map<String, String> refusedFunctions = new HashMap<>();
    final Set<String> tableFunctions = new HashSet<>();
    final Map<String, String> refusedTableFunctions = new HashMap<>();
    final Set<String> query = new HashSet<>();
    final Set<String> readCommands = new HashSet<>();
    final Set<String> writes = new HashSet<>();
    final Set<String> deltaWrites = new HashSet<>();
    /** Operator class -> why it is refused. */
    final Map<String, String> refused = new HashMap<>();
    /** Expression classes of the built-in functions that are not allowed. */
    final Set<String> refusedClasses = new HashSet<>();
    /** The server's starting settings: its SparkConf and its JVM's system properties (HiveServer2
     *  applies the latter to every session, through its HiveConf). */
    final Map<String, Set<String>> start = new HashMap<>();

    Tables(SparkSession session) {
      SparkConf conf = session.sparkContext().getConf();
      ObjectMapper json = new ObjectMapper();
      try {
        JsonNode f = json.readTree(new File(required(conf, "spark.kappa.sql.guard.functions")));
        names(f.path("functions").path("allowed"), functions);
        reasons(f.path("functions").path("refused"), refusedFunctions);
        names(f.path("table_functions").path("allowed"), tableFunctions);
        reasons(f.path("table_functions").path("refused"), refusedTableFunctions);
        JsonNode o = json.readTree(new File(required(conf, "spark.kappa.sql.guard.operators")));
        o.path("query").forEach(n -> query.add(n.asText()));
        o.path("read_commands").forEach(n -> readCommands.add(n.asText()));
        o.path("writes").forEach(n -> writes.add(n.asText()));
        o.path("delta_writes").forEach(n -> deltaWrites.add(n.asText()));
        o.path("refused").fields().forEachRemaining(e -> refused.put(e.getKey(), e.getValue().asText()));
      } catch (IOException e) {
        throw new IllegalStateException("kappa sql guard: cannot read its tables: " + e.getMessage(), e);
      }
      if (functions.isEmpty() || query.isEmpty()) {
        throw new IllegalStateException("kappa sql guard: its tables are empty");
      }
      Set<String> allowedClasses = new HashSet<>();
      Set<String> otherClasses = new HashSet<>();
      FunctionRegistry.builtin().listFunction().foreach(id -> {
        Option<ExpressionInfo> info = FunctionRegistry.builtin().lookupFunction(id);
        if (info.isDefined() && info.get().getClassName() != null) {
          (functions.contains(id.funcName().toLowerCase(Locale.ROOT)) ? allowedClasses : otherClasses)
              .add(info.get().getClassName());
        }
        return BoxedUnit.UNIT;
      });
      otherClasses.removeAll(allowedClasses);
      refusedClasses.addAll(otherClasses);
      for (scala.Tuple2<String, String> kv : conf.getAll()) {
        start.computeIfAbsent(kv._1(), k -> new HashSet<>()).add(kv._2());
      }
      System.getProperties().forEach((k, v) ->
          start.computeIfAbsent(String.valueOf(k), x -> new HashSet<>()).add(String.valueOf(v)));
    }

    private static String required(SparkConf conf, String key) {
      Option<String> v = conf.getOption(key);
      if (v.isEmpty()) {
        throw new IllegalStateException("kappa sql guard: " + key + " is not set (kappa serve sets it)");
      }
      return v.get();
    }

    private static void names(JsonNode list, Set<String> into) {
      list.forEach(n -> into.add(n.asText().toLowerCase(Locale.ROOT)));
    }

    private static void reasons(JsonNode map, Map<String, String> into) {
      map.fields().forEachRemaining(e -> into.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue().asText()));
    }
  }

  private static volatile Tables tables;

  static Tables tables(SparkSession session) {
    Tables t = tables;
    if (t == null) {
      synchronized (ReadOnlySqlGuard.class) {
        if (tables == null) {
          tables = new Tables(session);
        }
        t = tables;
      }
    }
    return t;
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectParser((session, delegate) -> new Parser(session, delegate));
    extensions.injectCheckRule(session -> plan -> {
      if (!TRUSTED.contains(session)) {
        check(session, plan);
      }
      return BoxedUnit.UNIT;
    });
    return BoxedUnit.UNIT;
  }

  /**
   * Refuses a session whose settings differ from the server's starting ones in a key not on
   * {@link #SESSION_SETTINGS} (rule {@code settings}), naming the keys.
   */
  static void checkSettings(SparkSession session) {
    Map<String, Set<String>> start = tables(session).start;
    List<String> changed = new ArrayList<>();
    List<scala.collection.immutable.Map<String, String>> server = new ArrayList<>();
    synchronized (TRUSTED) {
      for (Object trusted : TRUSTED) {
        server.add(((SparkSession) trusted).sessionState().conf().getAllConfs());
      }
    }
    session.sessionState().conf().getAllConfs().foreach(kv -> {
      if (!SESSION_SETTINGS.contains(kv._1()) && !start.getOrDefault(kv._1(), Set.of()).contains(kv._2())
          && server.stream().noneMatch(c -> c.get(kv._1()).contains(kv._2()))) {
        changed.add(kv._1());
      }
      return BoxedUnit.UNIT;
    });
    if (!changed.isEmpty()) {
      Collections.sort(changed);
      throw new Refused("settings", "this session changed " + String.join(", ", changed)
          + "; the endpoint's settings are fixed (a session may set only " + new TreeSet<>(SESSION_SETTINGS) + ")");
    }
  }

  /** The function name {@code parts} calls, refused unless allowed; {@code table}: a table-valued one. */
  static void checkFunction(SparkSession session, List<String> parts, boolean table) {
    Tables t = tables(session);
    String name = parts.get(parts.size() - 1).toLowerCase(Locale.ROOT);
    String qualifier = String.join(".", parts.subList(0, parts.size() - 1)).toLowerCase(Locale.ROOT);
    if (!qualifier.isEmpty() && !qualifier.equals("builtin") && !qualifier.equals("system.builtin")) {
      throw new Refused("functions", String.join(".", parts) + " is not a built-in function; "
          + "user-defined functions are off on this endpoint");
    }
    Set<String> allowed = table ? t.tableFunctions : t.functions;
    if (!allowed.contains(name)) {
      String why = (table ? t.refusedTableFunctions : t.refusedFunctions).getOrDefault(name,
          "not on the allow-list of built-in functions (kappa/resources/sql_functions.json)");
      throw new Refused("functions", name + (table ? " (table function)" : "") + ": " + why);
    }
  }

  /**
   * Refuses, as parsed and before any analysis, what Delta's SQL extension runs while the plan is
   * still being analyzed (RESTORE executes inside Delta's analysis rule, so a check rule would see
   * its result only) and dynamic SQL: every statement class loaded from Delta's jars (VACUUM,
   * OPTIMIZE, RESTORE, CLONE, CONVERT, DESCRIBE HISTORY/DETAIL, FSCK, REORG, GENERATE, constraints)
   * and {@code EXECUTE IMMEDIATE}.
   */
  static final class Parser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface delegate;

    Parser(SparkSession session, ParserInterface delegate) {
      this.session = session;
      this.delegate = delegate;
    }

    private LogicalPlan checked(LogicalPlan plan) {
      if (!TRUSTED.contains(session)) {
        checkSettings(session);
        everyNode(plan, node -> {
          LogicalPlan p = node;
          Class<?> cls = p.getClass();
          String name = cls.getSimpleName();
          if (name.contains("ExecuteImmediate")) {
            throw new Refused("no-dynamic-sql", "EXECUTE IMMEDIATE is off on this endpoint");
          }
          if (p instanceof UnresolvedRelation r && r.multipartIdentifier().size() == 2
              && r.multipartIdentifier().apply(1).contains("/")) {
            throw new Refused("no-path-reads", r.multipartIdentifier().mkString(".")
                + " reads files by path; query tables by name (SHOW TABLES)");
          }
          if (fromDelta(cls)) {
            throw new Refused("no-delta-commands", name + " is a Delta maintenance or history statement; "
                + "the endpoint serves tables read-only (the platform maintains them)");
          }
          p.setTagValue(FROM_CLIENT, Boolean.TRUE);
          String refused = tables(session).refused.get(cls.getName());
          if (refused != null && !name.startsWith("Unresolved")) {
            throw new Refused(p instanceof Command ? "commands" : "operators", name + ": " + refused
                + " (kappa/resources/sql_operators.json)");
          }
          if (p instanceof UnresolvedTableValuedFunction f) {
            checkFunction(session, scala.jdk.javaapi.CollectionConverters.asJava(f.name()), true);
          }
          p.expressions().foreach(root -> {
            ((Expression) root).foreach(e -> {
              if (e instanceof UnresolvedFunction f) {
                checkFunction(session, scala.jdk.javaapi.CollectionConverters.asJava(f.nameParts()), false);
              } else if (e instanceof UnresolvedGenerator g) {
                List<String> parts = new ArrayList<>();
                if (g.name().database().isDefined()) {
                  parts.add(g.name().database().get());
                }
                parts.add(g.name().funcName());
                checkFunction(session, parts, false);
              } else if (e instanceof ExpressionWithUnresolvedIdentifier) {
                throw new Refused("functions", "IDENTIFIER(...) as a function name is off on this endpoint; "
                    + "call functions by name");
              }
              return BoxedUnit.UNIT;
            });
            return BoxedUnit.UNIT;
          });
        });
      }
      return plan;
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      return checked(delegate.parsePlan(sqlText));
    }

    @Override
    public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext context) throws ParseException {
      return checked(delegate.parsePlanWithParameters(sqlText, context));
    }

    @Override
    public LogicalPlan parseQuery(String sqlText) throws ParseException {
      return checked(delegate.parseQuery(sqlText));
    }

    @Override
    public Expression parseExpression(String sqlText) throws ParseException {
      return delegate.parseExpression(sqlText);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
      return delegate.parseTableIdentifier(sqlText);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
      return delegate.parseFunctionIdentifier(sqlText);
    }

    @Override
    public scala.collection.immutable.Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
      return delegate.parseMultipartIdentifier(sqlText);
    }

    @Override
    public StructType parseRoutineParam(String sqlText) throws ParseException {
      return delegate.parseRoutineParam(sqlText);
    }

    @Override
    public StructType parseTableSchema(String sqlText) throws ParseException {
      return delegate.parseTableSchema(sqlText);
    }

    @Override
    public DataType parseDataType(String sqlText) throws ParseException {
      return delegate.parseDataType(sqlText);
    }
  }

  /**
   * Calls {@code visit} on every node of {@code plan}: children, subqueries in expressions, and
   * inner plans that are neither (the definitions of a parsed {@code WITH}, {@code UnresolvedWith}).
   */
  static void everyNode(LogicalPlan plan, java.util.function.Consumer<LogicalPlan> visit) {
    visit.accept(plan);
    plan.children().foreach(c -> {
      everyNode(c, visit);
      return BoxedUnit.UNIT;
    });
    plan.subqueries().foreach(q -> {
      everyNode(q, visit);
      return BoxedUnit.UNIT;
    });
    plan.innerChildren().foreach(c -> {
      if (c instanceof LogicalPlan inner) {
        everyNode(inner, visit);
      }
      return BoxedUnit.UNIT;
    });
  }

  /**
   * Whether {@code cls} comes from one of Delta's jars ({@code delta-spark_…}, {@code delta-storage…}):
   * the plan nodes of Delta's SQL extension, some of which live in Spark's own packages.
   */
  static boolean fromDelta(Class<?> cls) {
    java.security.CodeSource source = cls.getProtectionDomain().getCodeSource();
    String jar = source == null || source.getLocation() == null ? "" : source.getLocation().getPath();
    return jar.substring(jar.lastIndexOf('/') + 1).startsWith("delta-");
  }

  static void check(SparkSession session, LogicalPlan plan) {
    checkSettings(session);
    if (plan instanceof Command || fromDelta(plan.getClass())) {
      checkCommand(session, plan);  // whoever built it: a command is never the guard's to skip
    } else if (plan.exists(node -> fromClient((LogicalPlan) node))) {
      checkQuery(session, plan);
    }  // else a query Spark or Delta built on the session (see FROM_CLIENT), not the client's
  }

  /**
   * A query: every operator (subqueries included) on the operator table's {@code query} list,
   * every relation a table of the built-in catalog, no user-defined or refused function.
   */
  static void checkQuery(SparkSession session, LogicalPlan plan) {
    Tables t = tables(session);
    everyNode(plan, p -> {
      String cls = p.getClass().getName();
      if (!t.query.contains(cls)) {
        throw new Refused("operators", p.getClass().getSimpleName() + " is not a read-only query operator "
            + "(kappa/resources/sql_operators.json)");
      }
      if (p instanceof LogicalRelation r && r.catalogTable().isEmpty()) {
        throw new Refused("relations", "a relation that is not a table of the catalog");
      }
      if (p instanceof DataSourceV2Relation r && (r.catalog().isEmpty()
          || !r.catalog().get().name().equals(CatalogManager.SESSION_CATALOG_NAME()))) {
        throw new Refused("relations", "only tables of the built-in catalog are served");
      }
      p.expressions().foreach(root -> {
        ((Expression) root).foreach(e -> {
          if (e instanceof UserDefinedExpression u) {
            throw new Refused("functions", u.name() + " is a user-defined function; they are off on this endpoint");
          }
          if (t.refusedClasses.contains(e.getClass().getName())) {
            throw new Refused("functions", e.prettyName() + " is not on the allow-list of built-in functions");
          }
          return BoxedUnit.UNIT;
        });
        return BoxedUnit.UNIT;
      });
    });
  }

  private static boolean fromClient(LogicalPlan plan) {
    if (plan.getTagValue(FROM_CLIENT).isDefined()) {
      return true;
    }
    return plan.subqueries().exists(sub -> sub.exists(n -> fromClient((LogicalPlan) n)));
  }

  /** The login of the statement being analyzed (HiveServer2's session user), or null. */
  static String currentUser() {
    return CurrentUserContext.CURRENT_USER().get();
  }

  /**
   * Whether the current login may write: with CUSTOM authentication, a user whose role in the
   * password file is {@link #WRITER_ROLE} (asked of {@code PasswordFileAuthenticator.role}, which
   * reads the file the logins are checked against); with NONE, every login (the local developer's
   * loopback endpoint, where user names are not checked).
   */
  static boolean mayWrite(SparkSession session) {
    String auth = setting(session, "spark.hadoop.hive.server2.authentication");
    if (auth == null || !auth.equalsIgnoreCase("CUSTOM")) {
      return true;
    }
    String user = currentUser();
    if (user == null) {
      return false;
    }
    try {
      Object role = Class.forName("dev.kappa.serve.PasswordFileAuthenticator")
          .getMethod("role", String.class).invoke(null, user);
      return WRITER_ROLE.equals(role);
    } catch (ReflectiveOperationException e) {
      return false;  // fail closed
    }
  }

  private static void checkCommand(SparkSession session, LogicalPlan command) {
    Tables t = tables(session);
    String cls = command.getClass().getName();
    String name = command.getClass().getSimpleName();
    if (t.readCommands.contains(cls)) {
      return;
    }
    if (command instanceof SetCommand set) {
      Option<scala.Tuple2<String, Option<String>>> kv = set.kv();
      if (kv.isEmpty() || kv.get()._2().isEmpty() || SESSION_SETTINGS.contains(kv.get()._1())) {
        return;  // SET, SET -v, SET key: read a setting; or set one of the allowed ones
      }
      throw new Refused("settings", "SET " + kv.get()._1() + "=... changes the session's settings; "
          + "the endpoint's are fixed (a session may set only " + new TreeSet<>(SESSION_SETTINGS) + ")");
    }
    if (name.equals("ResetCommand")) {
      throw new Refused("settings", "RESET changes the session's settings; the endpoint's are fixed");
    }
    if (command instanceof CreateViewCommand view && view.viewType().toString().equals("LocalTempView")) {
      checkQuery(session, view.plan());  // visible to this session only (dbt's unit tests)
      return;
    }
    if (command instanceof DropTempViewCommand drop && drop.ident().namespace().length == 0) {
      return;  // one of this session's temporary views (a global one is global_temp.<name>)
    }
    boolean write = fromDelta(command.getClass()) ? t.deltaWrites.contains(name) : t.writes.contains(cls);
    if (!write) {
      throw new Refused("commands", name + " is neither a read-only command nor a write of dbt's "
          + "(kappa/resources/sql_operators.json)");
    }
    if (!mayWrite(session)) {
      throw new Refused("writes-only-for-dbt", name + " writes; only dbt's login (role " + WRITER_ROLE
          + " in the password file) writes, and only in its schema; user " + currentUser() + " reads");
    }
    String schema = setting(session, "spark.kappa.sql.guard.schema");
    String where = schema == null ? "nowhere (no writable schema is configured)" : "only in schema " + schema;
    List<String> targets = new ArrayList<>();
    String current = session.catalog().currentDatabase();
    for (int i = 0; i < command.productArity(); i++) {
      Object field = command.productElement(i);
      if (SOURCES.contains(command.productElementName(i))) {
        if (field instanceof LogicalPlan source) {
          checkQuery(session, source);
        }
        continue;
      }
      collect(session, field, current, targets);
    }
    if (targets.isEmpty()) {
      throw new Refused("writes-only-in-schema", name + " has no target this guard can name; writes are allowed " + where);
    }
    for (String target : targets) {
      if (schema == null || !schema.equalsIgnoreCase(target)) {
        throw new Refused("writes-only-in-schema", name + " writes in schema " + target + "; writes are allowed " + where);
      }
    }
  }

  private static String setting(SparkSession session, String key) {
    Option<String> v = session.sparkContext().getConf().getOption(key);
    return v.isDefined() ? v.get() : null;
  }

  /** Add the schema (namespace) of every table or namespace {@code value} names; check locations. */
  private static void collect(SparkSession session, Object value, String current, List<String> targets) {
    if (value instanceof Option<?> o) {
      if (o.isDefined()) {
        collect(session, o.get(), current, targets);
      }
    } else if (value instanceof SubqueryAlias alias) {
      collect(session, alias.child(), current, targets);
    } else if (value instanceof TableIdentifier t) {
      targets.add(t.database().isDefined() ? t.database().get() : current);
    } else if (value instanceof Identifier id) {
      String[] ns = id.namespace();
      targets.add(ns.length == 0 ? current : String.join(".", ns));
    } else if (value instanceof ResolvedIdentifier r) {
      collect(session, r.identifier(), current, targets);
    } else if (value instanceof ResolvedTable r) {
      collect(session, r.identifier(), current, targets);
    } else if (value instanceof ResolvedPersistentView r) {
      collect(session, r.identifier(), current, targets);
    } else if (value instanceof ResolvedNamespace r) {
      targets.add(r.namespace().isEmpty() ? current : r.namespace().mkString("."));
    } else if (value instanceof CatalogTable t) {
      collect(session, t.identifier(), current, targets);
      checkLocation(session, t.provider(), t.storage().locationUri().isDefined()
          ? Option.apply(t.storage().locationUri().get().toString()) : t.storage().properties().get("path"));
    } else if (value instanceof TableSpecBase spec) {
      checkLocation(session, spec.provider(), spec.location());
    } else if (value instanceof DataSourceV2Relation r) {
      collect(session, r.identifier(), current, targets);
    } else if (value instanceof LogicalRelation r) {
      collect(session, r.catalogTable(), current, targets);
    } else if (value instanceof HiveTableRelation r) {
      collect(session, r.tableMeta(), current, targets);
    } else if (value instanceof LogicalPlan p && p.getClass().getSimpleName().startsWith("Unresolved")) {
      targets.add("(unresolved)");
    }
  }

  private static void checkLocation(SparkSession session, Option<String> provider, Option<String> location) {
    if (provider.isDefined() && !provider.get().equalsIgnoreCase("delta")) {
      throw new Refused("writes-only-in-schema", "tables here are Delta tables, not " + provider.get());
    }
    String root = setting(session, "spark.kappa.sql.guard.location");
    if (location.isEmpty()) {
      throw new Refused("writes-only-in-schema", "a table here needs LOCATION under "
          + (root == null ? "a writable location (none is configured)" : root));
    }
    if (root == null || !under(location.get(), root)) {
      throw new Refused("writes-only-in-schema", "location " + location.get() + " is outside "
          + (root == null ? "any writable location" : root));
    }
  }

  static boolean under(String location, String root) {
    String l = normalize(location);
    String r = normalize(root);
    return l.equals(r) || l.startsWith(r.endsWith("/") ? r : r + "/");
  }

  private static String normalize(String location) {
    URI uri = URI.create(location.contains(":") ? location : "file:" + Paths.get(location).toAbsolutePath());
    if ("file".equals(uri.getScheme())) {
      return "file:" + Paths.get(uri.getPath()).normalize();
    }
    return uri.normalize().toString();
  }
}

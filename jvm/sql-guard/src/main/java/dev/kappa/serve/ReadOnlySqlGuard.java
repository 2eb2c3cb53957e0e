package dev.kappa.serve;

import java.net.URI;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.WeakHashMap;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
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
 * The SQL endpoint's statement policy (`kappa serve`): a Spark session extension whose check rule
 * runs on every analyzed plan of every session that is not the endpoint's own (the one that keeps
 * the catalog in step with the registry, marked with {@link #trust}). Check rules run at the end of
 * analysis, before a command executes (Spark's {@code SparkSessionExtensions.injectCheckRule}).
 *
 * <p>A refused statement fails with {@link Refused}, whose message starts {@code kappa sql guard:}
 * and names the rule:
 * <ul>
 *   <li>{@code no-reflection}: {@code reflect}, {@code java_method}, {@code try_reflect} anywhere in
 *       the plan (views and subqueries included);</li>
 *   <li>{@code no-path-reads}: a relation named {@code format.`/path`}, or a session whose
 *       {@code spark.sql.runSQLOnFiles} is on (the server turns it off; a client could turn it back
 *       on through {@code set:hiveconf:} in its URL);</li>
 *   <li>{@code no-delta-commands}, {@code no-dynamic-sql}: see {@link Parser};</li>
 *   <li>{@code no-code}: {@code ADD JAR/FILE/ARCHIVE}, {@code CREATE FUNCTION}, {@code LOAD DATA};</li>
 *   <li>{@code no-directory-writes}: {@code INSERT OVERWRITE [LOCAL] DIRECTORY};</li>
 *   <li>{@code no-settings}: {@code SET key=value} and {@code RESET};</li>
 *   <li>a session's own temporary views may be created and dropped (their queries are checked);</li>
 *   <li>{@code writes-only-in-schema}: any other command that is not read-only (DDL, DML, Delta's
 *       VACUUM/OPTIMIZE/RESTORE...) unless it is a known write whose every target is in the writable
 *       schema (dbt's, {@code spark.kappa.sql.guard.schema}) and whose location, if it names one,
 *       lies under {@code spark.kappa.sql.guard.location} with provider delta.</li>
 * </ul>
 * Both settings come from the SparkConf (fixed at start), never from a session's SQL conf.
 * Register with {@code spark.sql.extensions=...,dev.kappa.serve.ReadOnlySqlGuard}.
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

  /** Read-only commands any login may run (simple class names of Spark's analyzed plans). */
  private static final Set<String> READ_ONLY = Set.of(
      "ShowTables", "ShowTablesCommand", "ShowTableExtended", "ShowTablesExtended", "ShowViews",
      "ShowViewsCommand", "ShowNamespaces", "ShowColumns", "ShowColumnsCommand", "ShowFunctions",
      "ShowFunctionsCommand", "ShowCatalogs", "ShowCurrentNamespaceCommand", "ShowCurrentNamespace",
      "ShowCreateTable", "ShowCreateTableCommand", "ShowTableProperties", "ShowTablePropertiesCommand",
      "ShowPartitions", "ShowPartitionsCommand", "DescribeRelation", "DescribeTableCommand",
      "DescribeColumn", "DescribeColumnCommand", "DescribeNamespace", "DescribeDatabaseCommand",
      "DescribeFunction", "DescribeFunctionCommand", "DescribeQueryCommand", "ExplainCommand",
      "SetCatalogAndNamespace", "SetNamespaceCommand", "SetCatalogCommand", "NoopCommand",
      "ShowTablesV2", "ShowNamespacesCommand");

  /** Writes allowed when every target is in the writable schema. */
  private static final Set<String> SCHEMA_WRITES = Set.of(
      "CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect", "CreateView",
      "CreateViewCommand", "AlterViewAs", "AlterViewAsCommand", "DropTable", "DropTableCommand", "DropView",
      "CreateNamespace", "CreateDatabaseCommand", "AppendData", "OverwriteByExpression",
      "OverwritePartitionsDynamic", "DeleteFromTable", "UpdateTable", "MergeIntoTable", "DeltaDelete",
      "DeleteCommand", "UpdateCommand", "MergeIntoCommand",
      "DeltaUpdateTable", "DeltaMergeInto", "SetTableProperties", "UnsetTableProperties",
      "AlterTableSetPropertiesCommand", "AlterTableUnsetPropertiesCommand", "CommentOnTable",
      "RenameTable", "AlterTableRenameCommand", "TruncateTable", "RefreshTable", "CreateTableCommand",
      "CreateDataSourceTableCommand", "CreateDataSourceTableAsSelectCommand", "AddColumns",
      "ReplaceColumns", "AlterColumns", "DropColumns", "RenameColumn", "AlterTableAddColumnsCommand",
      "SetViewProperties", "UnsetViewProperties");

  /** Product fields of a write that hold what it reads, not what it writes. */
  private static final Set<String> SOURCES = Set.of("query", "source", "sourceTable", "plan");

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
        plan.foreach(node -> {
          Class<?> cls = node.getClass();
          String name = cls.getSimpleName();
          if (name.contains("ExecuteImmediate")) {
            throw new Refused("no-dynamic-sql", "EXECUTE IMMEDIATE is off on this endpoint");
          }
          if (node instanceof UnresolvedRelation r && r.multipartIdentifier().size() == 2
              && r.multipartIdentifier().apply(1).contains("/")) {
            throw new Refused("no-path-reads", r.multipartIdentifier().mkString(".")
                + " reads files by path; query tables by name (SHOW TABLES)");
          }
          if (fromDelta(cls)) {
            throw new Refused("no-delta-commands", name + " is a Delta maintenance or history statement; "
                + "the endpoint serves tables read-only (the platform maintains them)");
          }
          return BoxedUnit.UNIT;
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
   * Whether {@code cls} comes from one of Delta's jars ({@code delta-spark_…}, {@code delta-storage…}):
   * the plan nodes of Delta's SQL extension, some of which live in Spark's own packages.
   */
  static boolean fromDelta(Class<?> cls) {
    java.security.CodeSource source = cls.getProtectionDomain().getCodeSource();
    String jar = source == null || source.getLocation() == null ? "" : source.getLocation().getPath();
    return jar.substring(jar.lastIndexOf('/') + 1).startsWith("delta-");
  }

  static void check(SparkSession session, LogicalPlan plan) {
    if (session.sessionState().conf().runSQLonFile()) {
      throw new Refused("no-path-reads", "spark.sql.runSQLOnFiles is on in this session; "
          + "query tables by name");
    }
    plan.foreachWithSubqueries(node -> {
      LogicalPlan p = (LogicalPlan) node;
      p.expressions().foreach(root -> {
        ((Expression) root).foreach(e -> {
          String name = e.getClass().getSimpleName();
          if (name.equals("CallMethodViaReflection") || name.equals("TryReflect")) {
            throw new Refused("no-reflection", "reflect/java_method/try_reflect call Java methods; "
                + "they are off on this endpoint");
          }
          return BoxedUnit.UNIT;
        });
        return BoxedUnit.UNIT;
      });
      if (p instanceof Command || fromDelta(p.getClass())) {
        checkCommand(session, p);
      }
      return BoxedUnit.UNIT;
    });
  }

  private static void checkCommand(SparkSession session, LogicalPlan command) {
    String name = command.getClass().getSimpleName();
    String lower = name.toLowerCase(Locale.ROOT);
    if (READ_ONLY.contains(name)) {
      return;
    }
    if (command instanceof CreateViewCommand view && view.viewType().toString().equals("LocalTempView")) {
      return;  // visible to this session only (dbt's unit tests); its query is checked like any other
    }
    if (command instanceof DropTempViewCommand drop && drop.ident().namespace().length == 0) {
      return;  // one of this session's temporary views (a global one is global_temp.<name>)
    }
    if (command instanceof SetCommand set) {
      Option<scala.Tuple2<String, Option<String>>> kv = set.kv();
      if (kv.isEmpty() || kv.get()._2().isEmpty()) {
        return;  // SET, SET -v, SET key: read a setting
      }
      throw new Refused("no-settings", "SET " + kv.get()._1() + "=... changes the session's settings; "
          + "the endpoint's are fixed");
    }
    if (lower.startsWith("reset")) {
      throw new Refused("no-settings", "RESET changes the session's settings; the endpoint's are fixed");
    }
    if (lower.contains("jar") || lower.contains("addfile") || lower.contains("archive")
        || lower.contains("function") || lower.startsWith("loaddata")) {
      throw new Refused("no-code", name + " would load code or files into the endpoint");
    }
    if (lower.contains("dir")) {
      throw new Refused("no-directory-writes", name + " writes files outside any table");
    }
    String schema = setting(session, "spark.kappa.sql.guard.schema");
    String where = schema == null ? "nowhere (no writable schema is configured)" : "only in schema " + schema;
    if (!SCHEMA_WRITES.contains(name)) {
      throw new Refused("writes-only-in-schema", name + " is not a read-only statement; writes are allowed " + where);
    }
    List<String> targets = new ArrayList<>();
    String current = session.catalog().currentDatabase();
    for (int i = 0; i < command.productArity(); i++) {
      if (SOURCES.contains(command.productElementName(i))) {
        continue;
      }
      collect(session, command.productElement(i), current, targets);
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

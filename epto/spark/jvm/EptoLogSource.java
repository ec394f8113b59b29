package epto.spark.jvm;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("epto-jvm")}: batch reads of a directory of delivery logs in the JVM,
 * with the rows, options and errors of the Python {@code epto} source (docs/spark.md), plus what
 * Spark offers JVM sources only: column pruning (a query decodes only the columns it uses) and
 * filters on {@code node} and {@code offset} that cut the ranges read.
 */
public final class EptoLogSource implements TableProvider, DataSourceRegister {
  static final String DDL =
      "node BIGINT, offset BIGINT, source BIGINT, seq BIGINT, ts BIGINT, tag STRING, "
          + "payload BINARY, delivered_at TIMESTAMP, broadcast_at TIMESTAMP, signature BINARY";

  static final StructType SCHEMA =
      new StructType()
          .add("node", DataTypes.LongType)
          .add("offset", DataTypes.LongType)
          .add("source", DataTypes.LongType)
          .add("seq", DataTypes.LongType)
          .add("ts", DataTypes.LongType)
          .add("tag", DataTypes.StringType)
          .add("payload", DataTypes.BinaryType)
          .add("delivered_at", DataTypes.TimestampType)
          .add("broadcast_at", DataTypes.TimestampType)
          .add("signature", DataTypes.BinaryType);

  @Override
  public String shortName() {
    return "epto-jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true; // .schema(...) with a subset of the columns, as the Python source takes
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    for (StructField field : schema.fields()) {
      DataType want = null;
      for (StructField known : SCHEMA.fields()) {
        if (known.name().equals(field.name())) {
          want = known.dataType();
        }
      }
      if (want == null || !want.equals(field.dataType())) {
        throw new IllegalArgumentException(
            "the epto source has no column "
                + field.name()
                + " "
                + field.dataType().simpleString()
                + "; a schema given to it must take its columns from: "
                + DDL);
      }
    }
    return new LogTable(schema);
  }

  static final class LogTable implements Table, SupportsRead {
    private final StructType schema;

    LogTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "epto-jvm";
    }

    @Override
    @SuppressWarnings("deprecation") // columns() is built from it by default
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new LogScanBuilder(schema, options.asCaseSensitiveMap());
    }
  }

  static final long NO_LIMIT = Long.MAX_VALUE;

  /** Filters on {@code node} and {@code offset} taken by the source ({@code
   * epto.spark._pushdown.Pushed}): a set of nodes and half-open ranges. */
  static final class Pushed {
    Set<Long> nodes;
    long nodeLo = 0;
    long nodeHi = NO_LIMIT;
    long offsetLo = 0;
    long offsetHi = NO_LIMIT;

    private static Long integer(Object value) {
      if (value instanceof Long || value instanceof Integer || value instanceof Short
          || value instanceof Byte) {
        return ((Number) value).longValue();
      }
      return null;
    }

    private static long plusOne(long value) {
      return value == Long.MAX_VALUE ? value : value + 1;
    }

    boolean take(Filter filter) {
      String name;
      Object value;
      if (filter instanceof IsNotNull) {
        name = ((IsNotNull) filter).attribute();
        return name.equals("node") || name.equals("offset"); // never NULL
      } else if (filter instanceof In) {
        In in = (In) filter;
        if (!in.attribute().equals("node")) {
          return false;
        }
        Set<Long> allowed = new TreeSet<>();
        for (Object v : in.values()) {
          Long n = integer(v);
          if (n == null) {
            return false;
          }
          allowed.add(n);
        }
        if (nodes != null) {
          allowed.retainAll(nodes);
        }
        nodes = allowed;
        return true;
      } else if (filter instanceof EqualTo) {
        name = ((EqualTo) filter).attribute();
        value = ((EqualTo) filter).value();
      } else if (filter instanceof GreaterThan) {
        name = ((GreaterThan) filter).attribute();
        value = ((GreaterThan) filter).value();
      } else if (filter instanceof GreaterThanOrEqual) {
        name = ((GreaterThanOrEqual) filter).attribute();
        value = ((GreaterThanOrEqual) filter).value();
      } else if (filter instanceof LessThan) {
        name = ((LessThan) filter).attribute();
        value = ((LessThan) filter).value();
      } else if (filter instanceof LessThanOrEqual) {
        name = ((LessThanOrEqual) filter).attribute();
        value = ((LessThanOrEqual) filter).value();
      } else {
        return false;
      }
      Long v = integer(value);
      if (v == null || !(name.equals("node") || name.equals("offset"))) {
        return false;
      }
      if (filter instanceof EqualTo) {
        bound(name, v, plusOne(v));
      } else if (filter instanceof GreaterThan) {
        bound(name, plusOne(v), NO_LIMIT);
      } else if (filter instanceof GreaterThanOrEqual) {
        bound(name, v, NO_LIMIT);
      } else if (filter instanceof LessThan) {
        bound(name, 0, v);
      } else {
        bound(name, 0, plusOne(v));
      }
      return true;
    }

    private void bound(String name, long lo, long hi) {
      if (name.equals("node")) {
        nodeLo = Math.max(nodeLo, lo);
        nodeHi = Math.min(nodeHi, hi);
      } else {
        offsetLo = Math.max(offsetLo, lo);
        offsetHi = Math.min(offsetHi, hi);
      }
    }

    /** The ranges {@code [start[n], end[n])} cut to the filters; nodes outside go. */
    void apply(Map<Long, Long> start, Map<Long, Long> end) {
      for (Long n : new ArrayList<>(end.keySet())) {
        if (n < nodeLo || n >= nodeHi || (nodes != null && !nodes.contains(n))) {
          start.remove(n);
          end.remove(n);
          continue;
        }
        long first = Math.min(end.get(n), Math.max(start.get(n), offsetLo));
        start.put(n, first);
        end.put(n, Math.max(first, Math.min(end.get(n), offsetHi)));
      }
    }
  }

  static final class LogScanBuilder
      implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    private final Map<String, String> options;
    private StructType required;
    private final Pushed pushed = new Pushed();
    private Filter[] taken = new Filter[0];

    LogScanBuilder(StructType schema, Map<String, String> options) {
      this.required = schema;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> rest = new ArrayList<>();
      List<Filter> took = new ArrayList<>();
      for (Filter f : filters) {
        (pushed.take(f) ? took : rest).add(f);
      }
      taken = took.toArray(new Filter[0]);
      return rest.toArray(new Filter[0]);
    }

    @Override
    public Filter[] pushedFilters() {
      return taken;
    }

    @Override
    public Scan build() {
      return new LogScan(Options.parse(options), required, pushed);
    }
  }

  static final class LogScan implements Scan, Batch {
    private final Options options;
    private final StructType schema;
    private final Pushed pushed;

    LogScan(Options options, StructType schema, Pushed pushed) {
      this.options = options;
      this.schema = schema;
      this.pushed = pushed;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "epto-jvm " + options.path + " " + schema.simpleString();
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return new Planner(options).partitions(pushed);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ColumnarReader.Factory(schema.fieldNames(), options.failOnDataLoss);
    }
  }

  /** Ranges of node logs that one Spark task reads. */
  static final class LogPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String[] dirs;
    final long[] nodes;
    final long[] starts;
    final long[] ends;

    LogPartition(List<String> dirs, List<long[]> ranges) {
      this.dirs = dirs.toArray(new String[0]);
      this.nodes = new long[ranges.size()];
      this.starts = new long[ranges.size()];
      this.ends = new long[ranges.size()];
      for (int i = 0; i < ranges.size(); i++) {
        nodes[i] = ranges.get(i)[0];
        starts[i] = ranges.get(i)[1];
        ends[i] = ranges.get(i)[2];
      }
    }
  }

  /** Offsets resolved against what the logs hold now: {@code epto.spark._source._Planner}. */
  static final class Planner {
    private final Options options;

    Planner(Options options) {
      this.options = options;
    }

    /** {@code (first, end)} per node; {@code end} covers a lost tail, so that reading it
     * raises or skips exactly the lost records. */
    Map<Long, long[]> bounds() {
      Map<Long, long[]> out = new TreeMap<>();
      for (long n : LogFormat.listNodes(options.path)) {
        LogFormat.Extent held = LogFormat.extent(LogFormat.nodeDirectory(options.path, n));
        long durable = held.durableEnd == null ? 0 : held.durableEnd;
        out.put(n, new long[] {held.first, Math.max(held.end, durable)});
      }
      return out;
    }

    Map<Long, Long> resolve(
        String name, Options.Spec spec, Map<Long, long[]> bounds, long fallback) {
      Map<Long, Long> named = spec.byTimestamp() ? spec.times : spec.offsets;
      if (named != null) {
        List<Long> unknown = new ArrayList<>(new TreeSet<>(named.keySet()));
        unknown.removeAll(bounds.keySet());
        if (!unknown.isEmpty()) {
          String there = bounds.isEmpty() ? "none" : new ArrayList<>(bounds.keySet()).toString();
          throw Options.error(
              name
                  + " names node(s) "
                  + unknown
                  + " with no log under "
                  + options.path
                  + " (nodes there: "
                  + there
                  + ")");
        }
      }
      Map<Long, Long> out = new TreeMap<>();
      for (Map.Entry<Long, long[]> entry : bounds.entrySet()) {
        long node = entry.getKey();
        long first = entry.getValue()[0];
        long end = entry.getValue()[1];
        if (spec.byTimestamp()) {
          out.put(node, byTime(name, spec, node, first, end, fallback));
          continue;
        }
        long want;
        if ("earliest".equals(spec.word)) {
          want = Options.EARLIEST;
        } else if ("latest".equals(spec.word)) {
          want = Options.LATEST;
        } else {
          want = spec.offsets.getOrDefault(node, fallback);
        }
        out.put(node, want == Options.EARLIEST ? first : want == Options.LATEST ? end : want);
      }
      return out;
    }

    private long byTime(
        String name, Options.Spec spec, long node, long first, long end, long fallback) {
      Long millis = spec.millis(node);
      if (millis == null) {
        return fallback == Options.EARLIEST ? first : end;
      }
      Long found =
          LogFormat.firstAtOrAfter(LogFormat.nodeDirectory(options.path, node), millis * 1000);
      if (found != null) {
        return found;
      }
      if (name.startsWith("starting") && options.timestampStrategy.equals("error")) {
        String option =
            spec.every != null ? "startingTimestamp" : "startingOffsetsByTimestamp";
        throw Options.error(
            option
                + ": node "
                + node
                + " has no record delivered at or after "
                + millis
                + " ms (set startingOffsetsByTimestampStrategy=latest to start at its end)");
      }
      return end;
    }

    Map<Long, Long> checkStart(Map<Long, Long> start, Map<Long, long[]> bounds) {
      Map<Long, Long> out = new TreeMap<>();
      for (Map.Entry<Long, Long> entry : start.entrySet()) {
        long node = entry.getKey();
        long index = entry.getValue();
        long[] b = bounds.getOrDefault(node, new long[] {index, index});
        if (index < b[0] || index > b[1]) {
          if (options.failOnDataLoss) {
            throw new DataLossError(
                "node "
                    + node
                    + ": offset "
                    + index
                    + " is outside the log's ["
                    + b[0]
                    + ", "
                    + b[1]
                    + "] (set failOnDataLoss=false to skip)",
                null);
          }
          index = index < b[0] ? b[0] : b[1];
        }
        out.put(node, index);
      }
      return out;
    }

    private static boolean explicit(Options.Spec spec, long node) {
      if (spec.byTimestamp()) {
        return spec.millis(node) != null;
      }
      return spec.offsets != null && spec.offsets.getOrDefault(node, Options.LATEST) != Options.LATEST;
    }

    InputPartition[] partitions(Pushed pushed) {
      Map<Long, long[]> bounds = bounds();
      Map<Long, Long> wanted = resolve("startingOffsets", options.starting, bounds, Options.EARLIEST);
      Map<Long, Long> start = checkStart(wanted, bounds);
      Map<Long, Long> end = resolve("endingOffsets", options.ending, bounds, Options.LATEST);
      for (Map.Entry<Long, Long> entry : end.entrySet()) {
        long node = entry.getKey();
        if (explicit(options.ending, node) && entry.getValue() < wanted.get(node)) {
          throw Options.error(
              "node "
                  + node
                  + ": the ending offset "
                  + entry.getValue()
                  + " is before the starting offset "
                  + wanted.get(node)
                  + " (as the Kafka source, a read cannot go backwards)");
        }
      }
      for (Map.Entry<Long, Long> entry : end.entrySet()) {
        long node = entry.getKey();
        entry.setValue(Math.max(start.get(node), Math.min(entry.getValue(), bounds.get(node)[1])));
      }
      pushed.apply(start, end);
      List<InputPartition> parts =
          pack(options.path, start, end, options.maxRecordsPerPartition, options.minPartitions);
      if (parts.isEmpty()) {
        parts.add(new LogPartition(List.of(), List.of()));
      }
      return parts.toArray(new InputPartition[0]);
    }
  }

  /** {@code epto.spark._source.pack}: even partitions, at least {@code minPartitions}, none
   * above {@code maxRecords} offsets; ranges of several nodes share a partition. */
  static List<InputPartition> pack(
      String root, Map<Long, Long> start, Map<Long, Long> end, long maxRecords, Long minPartitions) {
    long total = 0;
    for (Map.Entry<Long, Long> e : end.entrySet()) {
      total += Math.max(0, e.getValue() - start.get(e.getKey()));
    }
    long count = Math.max(minPartitions == null ? 1 : minPartitions, -Math.floorDiv(-total, maxRecords));
    long size = Math.max(1, -Math.floorDiv(-total, count));
    List<InputPartition> parts = new ArrayList<>();
    List<String> dirs = new ArrayList<>();
    List<long[]> current = new ArrayList<>();
    long used = 0;
    for (Map.Entry<Long, Long> e : new TreeMap<>(end).entrySet()) {
      long node = e.getKey();
      long lo = start.get(node);
      long hi = e.getValue();
      String dir = LogFormat.nodeDirectory(root, node);
      while (lo < hi) {
        long take = Math.min(hi - lo, size - used);
        dirs.add(dir);
        current.add(new long[] {node, lo, lo + take});
        used += take;
        lo += take;
        if (used >= size) {
          parts.add(new LogPartition(dirs, current));
          dirs = new ArrayList<>();
          current = new ArrayList<>();
          used = 0;
        }
      }
    }
    if (!current.isEmpty()) {
      parts.add(new LogPartition(dirs, current));
    }
    return parts;
  }
}

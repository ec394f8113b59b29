package epto.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The batch options of the {@code epto} source, parsed as {@code epto.spark._options} parses
 * them: Kafka's names and rules, the same defaults and the same messages. Streaming-only options
 * are refused, as in a batch read of the Python source.
 */
final class Options {
  static final long EARLIEST = -2;
  static final long LATEST = -1;
  static final long DEFAULT_MAX_RECORDS_PER_PARTITION = 250_000;

  static final String[] NAMES = {
    "path",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "rows",
  };
  static final String[] STREAMING_ONLY = {
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"
  };

  /** {@code "earliest"}/{@code "latest"}, per-node indices, or times. */
  static final class Spec {
    final String word; // "earliest", "latest" or null
    final Map<Long, Long> offsets; // per-node indices, or null
    final Long every; // milliseconds for every node (times only)
    final Map<Long, Long> times; // node -> milliseconds (times only), or null

    private Spec(String word, Map<Long, Long> offsets, Long every, Map<Long, Long> times) {
      this.word = word;
      this.offsets = offsets;
      this.every = every;
      this.times = times;
    }

    static Spec word(String word) {
      return new Spec(word, null, null, null);
    }

    static Spec offsets(Map<Long, Long> offsets) {
      return new Spec(null, offsets, null, null);
    }

    static Spec times(Long every, Map<Long, Long> perNode) {
      return new Spec(null, null, every, perNode);
    }

    boolean byTimestamp() {
      return times != null;
    }

    Long millis(long node) {
      Long t = times.get(node);
      return t != null ? t : every;
    }
  }

  final String path;
  final Spec starting;
  final Spec ending;
  final String timestampStrategy;
  final boolean failOnDataLoss;
  final Long minPartitions;
  final long maxRecordsPerPartition;

  private Options(
      String path,
      Spec starting,
      Spec ending,
      String timestampStrategy,
      boolean failOnDataLoss,
      Long minPartitions,
      long maxRecordsPerPartition) {
    this.path = path;
    this.starting = starting;
    this.ending = ending;
    this.timestampStrategy = timestampStrategy;
    this.failOnDataLoss = failOnDataLoss;
    this.minPartitions = minPartitions;
    this.maxRecordsPerPartition = maxRecordsPerPartition;
  }

  static IllegalArgumentException error(String message) {
    return new IllegalArgumentException(message);
  }

  /** Python's {@code repr} of a string, for messages that quote a value. */
  static String repr(String text) {
    boolean single = text.indexOf('\'') >= 0 && text.indexOf('"') < 0;
    char quote = single ? '"' : '\'';
    StringBuilder out = new StringBuilder().append(quote);
    for (char c : text.toCharArray()) {
      if (c == '\\' || c == quote) {
        out.append('\\');
      }
      out.append(c);
    }
    return out.append(quote).toString();
  }

  private static final ObjectMapper JSON = new ObjectMapper();

  /** A flat {@code {"<node>": int}} object, or Kafka's {@code {"<name>": {...}}}. */
  private static Map<String, JsonNode> jsonObject(String name, String text) {
    JsonNode data;
    try {
      data = JSON.readTree(text);
    } catch (Exception e) {
      throw error(name + ": not JSON: " + repr(text));
    }
    if (data == null || !data.isObject() || data.size() == 0) {
      throw error(name + " must be a non-empty JSON object, got " + repr(text));
    }
    boolean nested = true;
    for (JsonNode value : data) {
      nested &= value.isObject();
    }
    if (nested) {
      if (data.size() != 1) {
        List<String> names = new ArrayList<>();
        data.fieldNames().forEachRemaining(n -> names.add(repr(n)));
        names.sort(null);
        throw error(name + ": nested offsets name one log directory, got " + names);
      }
      data = data.elements().next();
    }
    Map<String, JsonNode> out = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = data.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> entry = it.next();
      String key = entry.getKey();
      JsonNode value = entry.getValue();
      if (!LogFormat.allDigits(key) || !value.isIntegralNumber() || !value.canConvertToLong()) {
        String shown = value.isTextual() ? repr(value.asText()) : value.toString();
        throw error(
            name
                + ": bad entry "
                + repr(key)
                + ": "
                + shown
                + " (want a node id and an integer)");
      }
      out.put(key, value);
    }
    return out;
  }

  private static Spec offsets(String name, String text, String word, long allowed) {
    String lower = text.strip().toLowerCase();
    if (lower.equals(word)) {
      return Spec.word(word);
    }
    if (lower.equals("earliest") || lower.equals("latest")) {
      throw error(name + "=" + lower + " is not allowed for batch reads");
    }
    if (!text.strip().startsWith("{")) {
      throw error(name + " must be one of " + word + " or a JSON object, got " + repr(text));
    }
    Map<Long, Long> out = new TreeMap<>();
    for (Map.Entry<String, JsonNode> entry : jsonObject(name, text).entrySet()) {
      long value = entry.getValue().asLong();
      if (value < 0 && value != allowed) {
        String why =
            value == EARLIEST
                ? " (earliest) is not allowed here"
                : value == LATEST ? " (latest) is not allowed here" : " must be >= 0";
        throw error(name + ": node " + entry.getKey() + ": " + value + why);
      }
      out.put(parseNode(entry.getKey()), value);
    }
    return Spec.offsets(out);
  }

  private static long parseNode(String key) {
    try {
      return Long.parseLong(key);
    } catch (NumberFormatException e) {
      throw error("node id " + key + " is too large");
    }
  }

  private static long millis(String name, String text) {
    long value;
    try {
      value = Long.parseLong(text.strip());
    } catch (NumberFormatException e) {
      throw error(name + " must be milliseconds since the epoch, got " + repr(text));
    }
    if (value < 0) {
      throw error(name + " must be >= 0, got " + value);
    }
    return value;
  }

  private static Map<Long, Long> times(String name, String text) {
    Map<Long, Long> out = new TreeMap<>();
    for (Map.Entry<String, JsonNode> entry : jsonObject(name, text).entrySet()) {
      String label = name + " (node " + entry.getKey() + ")";
      out.put(parseNode(entry.getKey()), millis(label, entry.getValue().asText()));
    }
    return out;
  }

  private static Long positive(Map<String, String> opts, String name) {
    String text = opts.get(name.toLowerCase());
    if (text == null) {
      return null;
    }
    long value;
    try {
      value = Long.parseLong(text.strip());
    } catch (NumberFormatException e) {
      throw error(name + " must be an integer, got " + repr(text));
    }
    if (value < 1) {
      throw error(name + " must be >= 1, got " + value);
    }
    return value;
  }

  static String hostname() {
    try {
      return InetAddress.getLocalHost().getHostName();
    } catch (Exception e) {
      String env = System.getenv("HOSTNAME");
      return env != null ? env : "localhost";
    }
  }

  /** {@code path} made absolute on the driver (the JVM's working directory, as Spark's file
   * sources do); raises when it is not a directory there. */
  static String absolutePath(String path) {
    String expanded = path;
    if (path.equals("~") || path.startsWith("~/")) {
      expanded = System.getProperty("user.home") + path.substring(1);
    }
    Path full = Paths.get(expanded).toAbsolutePath().normalize();
    if (!Files.isDirectory(full)) {
      String what = Files.exists(full) ? "is not a directory" : "does not exist";
      throw error(
          "the epto source's path "
              + full
              + " "
              + what
              + " (on the driver, host "
              + hostname()
              + ")");
    }
    return full.toString();
  }

  private static String known() {
    List<String> names = new ArrayList<>(List.of(NAMES));
    names.sort(String.CASE_INSENSITIVE_ORDER);
    return String.join(", ", names);
  }

  /** Options of a batch read; keys are compared lower-cased (Spark passes them so). */
  static Options parse(Map<String, String> options) {
    Map<String, String> opts = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      opts.put(e.getKey().toLowerCase(), e.getValue());
    }
    Map<String, String> lowered = new LinkedHashMap<>();
    for (String name : NAMES) {
      lowered.put(name.toLowerCase(), name);
    }
    for (String key : opts.keySet()) {
      if (!lowered.containsKey(key)) {
        String near = Similar.closest(key, new ArrayList<>(lowered.keySet()), 0.6);
        String hint = near == null ? "" : "; did you mean " + lowered.get(near) + "?";
        throw error(
            "unknown option "
                + repr(key)
                + " for the epto source"
                + hint
                + " (known: "
                + known()
                + ")");
      }
    }
    for (String name : STREAMING_ONLY) {
      if (opts.containsKey(name.toLowerCase())) {
        throw error(name + " applies to streaming reads only");
      }
    }
    String path = opts.get("path");
    if (path == null || path.isEmpty()) {
      throw error("the epto source needs a path: .load(LOGDIR) or .option('path')");
    }
    Spec starting =
        offsets(
            "startingOffsets", opts.getOrDefault("startingoffsets", "earliest"), "earliest",
            EARLIEST);
    if (opts.containsKey("startingtimestamp")) { // Kafka's precedence: the single time first
      starting = Spec.times(millis("startingTimestamp", opts.get("startingtimestamp")), Map.of());
    } else if (opts.containsKey("startingoffsetsbytimestamp")) {
      starting =
          Spec.times(
              null, times("startingOffsetsByTimestamp", opts.get("startingoffsetsbytimestamp")));
    }
    Spec ending =
        offsets("endingOffsets", opts.getOrDefault("endingoffsets", "latest"), "latest", LATEST);
    if (opts.containsKey("endingtimestamp")) {
      ending = Spec.times(millis("endingTimestamp", opts.get("endingtimestamp")), Map.of());
    } else if (opts.containsKey("endingoffsetsbytimestamp")) {
      ending =
          Spec.times(
              null, times("endingOffsetsByTimestamp", opts.get("endingoffsetsbytimestamp")));
    }
    String strategy =
        opts.getOrDefault("startingoffsetsbytimestampstrategy", "error").strip().toLowerCase();
    if (!strategy.equals("error") && !strategy.equals("latest")) {
      throw error(
          "startingOffsetsByTimestampStrategy must be error or latest, got " + repr(strategy));
    }
    String fail = opts.getOrDefault("failondataloss", "true");
    String failWord = fail.strip().toLowerCase();
    if (!failWord.equals("true") && !failWord.equals("false")) {
      throw error("failOnDataLoss must be true or false, got " + repr(fail));
    }
    String rows = opts.getOrDefault("rows", "per-node").strip().toLowerCase();
    if (rows.equals("events")) {
      throw error(
          "the epto-jvm reader reads per-node copies only (rows=per-node); "
              + "read one row per event with format(\"epto\")");
    } else if (!rows.equals("per-node")) {
      throw error("rows must be events or per-node, got " + repr(rows));
    }
    Long minPartitions = positive(opts, "minPartitions");
    Long perPartition = positive(opts, "maxRecordsPerPartition");
    return new Options(
        absolutePath(path), // last: a bad option is named even with a wrong path
        starting,
        ending,
        strategy,
        failWord.equals("true"),
        minPartitions,
        perPartition == null ? DEFAULT_MAX_RECORDS_PER_PARTITION : perPartition);
  }

  /** {@code difflib.get_close_matches(word, candidates, n=1, cutoff)}: the candidate with the
   * highest {@code SequenceMatcher} ratio at or above the cutoff. */
  static final class Similar {
    private Similar() {}

    static String closest(String word, List<String> candidates, double cutoff) {
      String best = null;
      double bestScore = -1;
      for (String x : candidates) {
        double score = ratio(x, word);
        if (score >= cutoff
            && (score > bestScore || (score == bestScore && x.compareTo(best) > 0))) {
          best = x;
          bestScore = score;
        }
      }
      return best;
    }

    static double ratio(String a, String b) {
      int total = a.length() + b.length();
      return total == 0 ? 1.0 : 2.0 * matches(a, 0, a.length(), b, 0, b.length()) / total;
    }

    /** Characters in matching blocks: the longest common substring, then the same on each
     * side (SequenceMatcher without junk, which short strings never have). */
    private static int matches(String a, int alo, int ahi, String b, int blo, int bhi) {
      int besti = alo;
      int bestj = blo;
      int bestsize = 0;
      int[] prev = new int[bhi - blo + 1];
      for (int i = alo; i < ahi; i++) {
        int[] cur = new int[bhi - blo + 1];
        for (int j = blo; j < bhi; j++) {
          if (a.charAt(i) == b.charAt(j)) {
            int k = prev[j - blo] + 1;
            cur[j - blo + 1] = k;
            if (k > bestsize) {
              besti = i - k + 1;
              bestj = j - k + 1;
              bestsize = k;
            }
          }
        }
        prev = cur;
      }
      if (bestsize == 0) {
        return 0;
      }
      return bestsize
          + matches(a, alo, besti, b, blo, bestj)
          + matches(a, besti + bestsize, ahi, b, bestj + bestsize, bhi);
    }
  }
}

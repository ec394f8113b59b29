package epto.spark.jvm;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;

/**
 * The delivery log's files, read as {@code epto.log} and {@code epto.spark._columnar} read them
 * (docs/delivery-log.md has the byte format): the same walk over segments and frames, the same
 * checks (header, length, CRC32, index contiguity, the manifest's durable end) and the same
 * messages, so that the JVM reader fails where the Python reader fails.
 */
public final class LogFormat {
  private LogFormat() {}

  static final byte[] MAGIC = "EPTOLOG\0".getBytes(StandardCharsets.US_ASCII);
  static final byte[] MANIFEST_MAGIC = "EPTOEND\0".getBytes(StandardCharsets.US_ASCII);
  static final int VERSION = 1;
  static final int HEADER_SIZE = 32;
  /** Fixed part of a record's body: index, source, seq, ts, delivered_at, broadcast_at, flags,
   * signature length. */
  static final int BODY_SIZE = 51;
  static final long MAX_BODY = 1L << 30;
  static final int SLOT_SIZE = 40;
  static final int FLAG_OUT_OF_ORDER = 0x01;
  static final int FLAG_HAS_BROADCAST = 0x02;

  private static final VarHandle LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final VarHandle INT =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

  static long u64(byte[] data, int at) {
    return (long) LONG.get(data, at);
  }

  static long u32(byte[] data, int at) {
    return Integer.toUnsignedLong((int) INT.get(data, at));
  }

  static long u64(ByteBuffer data, int at) {
    return data.getLong(at);
  }

  static long u32(ByteBuffer data, int at) {
    return Integer.toUnsignedLong(data.getInt(at));
  }

  static int u16(ByteBuffer data, int at) {
    return Short.toUnsignedInt(data.getShort(at));
  }

  static final class Segment {
    final Path path;
    final long firstIndex;
    final boolean closed;

    Segment(Path path, long firstIndex, boolean closed) {
      this.path = path;
      this.firstIndex = firstIndex;
      this.closed = closed;
    }
  }

  static String nodeDirectory(String root, long node) {
    return root + File.separator + node;
  }

  static boolean allDigits(String name) {
    if (name.isEmpty()) {
      return false;
    }
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (c < '0' || c > '9') {
        return false;
      }
    }
    return true;
  }

  /** Node ids with a log directory under {@code root}, ascending. */
  static List<Long> listNodes(String root) {
    File[] entries = new File(root).listFiles();
    List<Long> out = new ArrayList<>();
    if (entries == null) {
      return out;
    }
    for (File entry : entries) {
      String name = entry.getName();
      if (allDigits(name) && name.length() < 19 && entry.isDirectory()) {
        out.add(Long.parseLong(name));
      }
    }
    out.sort(null);
    return out;
  }

  /** The node's segments in index order (a {@code .open} before a {@code .seg} of the same
   * first index, as in Python). */
  static List<Segment> listSegments(String nodeDir) {
    String[] names = new File(nodeDir).list();
    List<Segment> out = new ArrayList<>();
    if (names == null) {
      return out;
    }
    for (String name : names) {
      boolean closed;
      String stem;
      if (name.endsWith(".seg")) {
        closed = true;
        stem = name.substring(0, name.length() - 4);
      } else if (name.endsWith(".open")) {
        closed = false;
        stem = name.substring(0, name.length() - 5);
      } else {
        continue;
      }
      if (stem.length() != 20 || !allDigits(stem)) {
        continue;
      }
      long first;
      try {
        first = Long.parseUnsignedLong(stem);
      } catch (NumberFormatException e) {
        continue; // above 2**64: no delivery index can be there
      }
      out.add(new Segment(Paths.get(nodeDir, name), first, closed));
    }
    out.sort(
        (a, b) -> {
          int c = Long.compareUnsigned(a.firstIndex, b.firstIndex);
          return c != 0 ? c : Boolean.compare(a.closed, b.closed);
        });
    return out;
  }

  static String segmentName(long firstIndex, boolean closed) {
    String digits = Long.toUnsignedString(firstIndex);
    return "0".repeat(Math.max(0, 20 - digits.length())) + digits + (closed ? ".seg" : ".open");
  }

  /**
   * A segment's bytes (little-endian) and whether it is closed, following a concurrent close
   * (rename). A closed segment never changes, so it is mapped rather than copied (reading a
   * million records' files costs a third of the CPU); the open one is read into memory, since
   * a writer's recovery may cut it while it is read.
   */
  static final class Loaded {
    final ByteBuffer data;
    final int size;
    final boolean closed;

    Loaded(ByteBuffer data, boolean closed) {
      this.data = data.order(ByteOrder.LITTLE_ENDIAN);
      this.size = data.limit();
      this.closed = closed;
    }
  }

  private static Loaded read(Path path, boolean closed) throws IOException {
    if (!closed) {
      return new Loaded(ByteBuffer.wrap(Files.readAllBytes(path)), false);
    }
    try (FileChannel channel = FileChannel.open(path)) {
      long size = channel.size();
      if (size > Integer.MAX_VALUE) {
        throw new LogCorruptError(path + ": segment of " + size + " bytes (over 2 GiB)");
      }
      return new Loaded(channel.map(FileChannel.MapMode.READ_ONLY, 0, size), true);
    }
  }

  static Loaded load(Segment seg) {
    try {
      try {
        return read(seg.path, seg.closed);
      } catch (NoSuchFileException e) {
        if (seg.closed) {
          throw e;
        }
      }
      return read(seg.path.resolveSibling(segmentName(seg.firstIndex, true)), true);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static long crc32(byte[] data, int at, int length) {
    CRC32 crc = new CRC32();
    crc.update(data, at, length);
    return crc.getValue();
  }

  /** The first index in a segment header; checks it as {@code decode_header} does. */
  static long headerFirstIndex(ByteBuffer buffer, String where) {
    if (buffer.limit() < HEADER_SIZE) {
      throw new LogCorruptError(where + ": header cut short (" + buffer.limit() + " bytes)");
    }
    byte[] data = new byte[HEADER_SIZE];
    buffer.get(0, data);
    if (!Arrays.equals(data, 0, 8, MAGIC, 0, 8)) {
      throw new LogCorruptError(where + ": not a delivery-log segment (bad magic)");
    }
    if (crc32(data, 0, 28) != u32(data, 28)) {
      throw new LogCorruptError(where + ": header CRC mismatch");
    }
    long version = u32(data, 8);
    if (version != VERSION) {
      throw new LogCorruptError(where + ": unsupported version " + version);
    }
    return u64(data, 20);
  }

  /** The manifest's durable end, or {@code null} without a manifest. */
  static Long manifestEnd(String nodeDir) {
    Path path = Paths.get(nodeDir, "MANIFEST");
    byte[] data;
    try {
      data = Files.readAllBytes(path);
    } catch (NoSuchFileException e) {
      return null;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    long bestGeneration = 0;
    Long end = null;
    for (int slot = 0; slot < 2; slot++) {
      int at = slot * SLOT_SIZE;
      if (data.length < at + SLOT_SIZE
          || !Arrays.equals(data, at, at + 8, MANIFEST_MAGIC, 0, 8)
          || u32(data, at + 8) != VERSION
          || crc32(data, at, 36) != u32(data, at + 36)) {
        continue;
      }
      long generation = u64(data, at + 20);
      if (end == null || Long.compareUnsigned(generation, bestGeneration) > 0) {
        bestGeneration = generation;
        end = u64(data, at + 28);
      }
    }
    if (end == null) {
      throw new LogCorruptError(path + ": no valid manifest slot");
    }
    return end;
  }

  static LogTailLostError tailLost(String nodeDir, long end, long durable) {
    return new LogTailLostError(
        nodeDir
            + ": data loss: the log ends at index "
            + end
            + " but its manifest records "
            + durable
            + " as durable (delivery indices "
            + end
            + ".."
            + (durable - 1)
            + " are lost)");
  }

  /** {@code epto.log._reader.check_end}. */
  static void checkEnd(String nodeDir, long expected, Long end, Long durable, boolean torn) {
    if (durable != null && expected < durable && (end == null || expected < end)) {
      throw tailLost(nodeDir, expected, durable);
    }
    if (end != null && expected < end && !torn) {
      throw new LogGapError(
          nodeDir + ": log ends at index " + expected + ", " + end + " was asked for");
    }
  }

  /** One segment's bytes and the byte positions of the frames to read in it. */
  static final class Chunk {
    final ByteBuffer data;
    final int[] positions;
    final int count;

    Chunk(ByteBuffer data, int[] positions, int count) {
      this.data = data;
      this.positions = positions;
      this.count = count;
    }
  }

  /**
   * The records {@code start <= index < end} of one node's log, segment by segment: {@code
   * epto.spark._columnar.scan_frames}, step for step (same ranges, same gap, lost-tail and
   * corruption errors; with {@code skipMissing} what is missing is skipped).
   */
  static final class Walk {
    private final String nodeDir;
    private final Long end;
    private final boolean skipMissing;
    private final Long durable;
    private final List<Segment> segments;
    private int next;
    private long expected;
    private boolean torn;
    private boolean done;
    private final CRC32 crc = new CRC32();

    Walk(String nodeDir, long start, Long end, boolean skipMissing) {
      this.nodeDir = nodeDir;
      this.end = end;
      this.skipMissing = skipMissing;
      this.durable = manifestEnd(nodeDir); // before the listing, as iter_raw does
      this.segments = listSegments(nodeDir);
      int first = 0;
      while (first + 1 < segments.size()
          && Long.compareUnsigned(segments.get(first + 1).firstIndex, start) <= 0) {
        first++;
      }
      this.next = first;
      this.expected = start;
    }

    private boolean belowEnd(long index) {
      return end == null || Long.compareUnsigned(index, end) < 0;
    }

    /** The next segment with records to read, or {@code null} at the end (after the
     * end-of-walk checks). */
    Chunk next() {
      while (!done) {
        if (next >= segments.size()) {
          finish();
          return null;
        }
        Segment seg = segments.get(next++);
        if (!belowEnd(seg.firstIndex)) {
          done = true;
          return null;
        }
        if (Long.compareUnsigned(seg.firstIndex, expected) > 0) {
          if (!skipMissing) {
            throw new LogGapError(
                nodeDir
                    + ": delivery indices "
                    + expected
                    + ".."
                    + (seg.firstIndex - 1)
                    + " are missing");
          }
          expected = seg.firstIndex;
        }
        Loaded loaded = load(seg);
        ByteBuffer data = loaded.data;
        int size = loaded.size;
        if (!loaded.closed && size < HEADER_SIZE) {
          continue; // a segment being created: the header is not written yet
        }
        long firstIndex = headerFirstIndex(data, seg.path.toString());
        if (firstIndex != seg.firstIndex) {
          throw new LogCorruptError(
              seg.path + ": header says first index " + Long.toUnsignedString(firstIndex));
        }
        int[] positions = new int[Math.max(16, (size - HEADER_SIZE) / 64)];
        int count = 0;
        int pos = HEADER_SIZE;
        boolean reachedEnd = false;
        // A frame needs 8 header bytes and a body of at least BODY_SIZE bytes, so fewer
        // than 16 bytes left is a torn tail, as in the Python reader.
        while (pos + 16 <= size) {
          long length = u32(data, pos);
          long sum = u32(data, pos + 4);
          long index = u64(data, pos + 8);
          int body = pos + 8;
          long stop = body + length;
          if (length < BODY_SIZE || length > MAX_BODY || stop > size) {
            break;
          }
          crc.reset();
          data.limit((int) stop).position(body);
          crc.update(data); // the body's bytes, without a copy
          data.limit(size);
          if (crc.getValue() != sum) {
            break;
          }
          if (index == expected && belowEnd(index)) { // the usual case, first
            if (count == positions.length) {
              positions = Arrays.copyOf(positions, 2 * count);
            }
            positions[count++] = pos;
            expected++;
            pos = (int) stop;
            continue;
          }
          int here = pos;
          pos = (int) stop;
          if (Long.compareUnsigned(index, expected) < 0) {
            continue;
          }
          if (!belowEnd(index)) {
            reachedEnd = true;
            break;
          }
          if (!skipMissing) {
            throw new LogGapError(
                nodeDir
                    + ": expected index "
                    + Long.toUnsignedString(expected)
                    + ", found "
                    + Long.toUnsignedString(index));
          }
          if (count == positions.length) {
            positions = Arrays.copyOf(positions, 2 * count);
          }
          positions[count++] = here;
          expected = index + 1;
        }
        if (reachedEnd) {
          done = true;
        } else if (pos < size) {
          if (loaded.closed) {
            throw new LogCorruptError(seg.path + ": damaged record at byte " + pos);
          }
          torn = true; // torn or in-progress tail of the open segment
          finish();
        }
        if (count > 0) {
          return new Chunk(data, positions, count);
        }
      }
      return null;
    }

    private void finish() {
      done = true;
      if (!skipMissing) {
        checkEnd(nodeDir, expected, end, durable, torn);
      }
    }
  }

  /** What one node's log holds: {@code epto.log.LogExtent}. */
  static final class Extent {
    final long first;
    final long end;
    final Long durableEnd;

    Extent(long first, long end, Long durableEnd) {
      this.first = first;
      this.end = end;
      this.durableEnd = durableEnd;
    }
  }

  private static final Map<String, Long> CLOSED_ENDS = new ConcurrentHashMap<>();
  private static final int CLOSED_ENDS_MAX = 100_000;

  /**
   * {@code epto.spark._columnar.extent}: in a closed last segment the frames are followed by
   * their lengths without checking their CRCs (a damaged record fails the read that meets it),
   * and its end is remembered while the file keeps its size and modification time; the open
   * segment's frames are checked, since a bad frame ends what may be read of it.
   */
  static Extent extent(String nodeDir) {
    Long durable = manifestEnd(nodeDir); // before the listing
    List<Segment> segments = listSegments(nodeDir);
    if (segments.isEmpty()) {
      return new Extent(0, 0, durable);
    }
    long first = segments.get(0).firstIndex;
    Segment last = segments.get(segments.size() - 1);
    String key = null;
    if (last.closed) {
      try {
        BasicFileAttributes attrs = Files.readAttributes(last.path, BasicFileAttributes.class);
        key = last.path + "\0" + attrs.size() + "\0" + attrs.lastModifiedTime().to(java.util.concurrent.TimeUnit.NANOSECONDS);
        Long known = CLOSED_ENDS.get(key);
        if (known != null) {
          return new Extent(first, known, durable);
        }
      } catch (NoSuchFileException e) {
        // deleted since the listing: load() below raises
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
    Loaded loaded = load(last);
    ByteBuffer data = loaded.data;
    long end = last.firstIndex;
    int size = loaded.size;
    if (!loaded.closed && size < HEADER_SIZE) {
      return new Extent(first, end, durable);
    }
    long firstIndex = headerFirstIndex(data, last.path.toString());
    if (firstIndex != last.firstIndex) {
      throw new LogCorruptError(
          last.path + ": header says first index " + Long.toUnsignedString(firstIndex));
    }
    if (loaded.closed) {
      int pos = HEADER_SIZE;
      while (pos + 16 <= size) {
        long length = u32(data, pos);
        long stop = pos + 8 + length;
        if (length < BODY_SIZE || length > MAX_BODY || stop > size) {
          break;
        }
        end = u64(data, pos + 8) + 1;
        pos = (int) stop;
      }
      if (pos < size) {
        throw new LogCorruptError(last.path + ": damaged record at byte " + pos);
      }
      if (key != null && key.contains("\0" + size + "\0")) {
        if (CLOSED_ENDS.size() >= CLOSED_ENDS_MAX) {
          CLOSED_ENDS.clear();
        }
        CLOSED_ENDS.put(key, end);
      }
    } else {
      Walk walk = new Walk(nodeDir, last.firstIndex, null, true);
      for (Chunk chunk = walk.next(); chunk != null; chunk = walk.next()) {
        end = u64(chunk.data, chunk.positions[chunk.count - 1] + 8) + 1;
      }
    }
    return new Extent(first, end, durable);
  }

  /** The index of the first record delivered at or after {@code micros}, else {@code null}
   * ({@code epto.spark._columnar.first_at_or_after}; missing records are skipped). */
  static Long firstAtOrAfter(String nodeDir, long micros) {
    Walk walk = new Walk(nodeDir, 0, null, true);
    for (Chunk chunk = walk.next(); chunk != null; chunk = walk.next()) {
      for (int i = 0; i < chunk.count; i++) {
        int at = chunk.positions[i];
        if (u64(chunk.data, at + 8 + 32) >= micros) {
          return u64(chunk.data, at + 8);
        }
      }
    }
    return null;
  }
}

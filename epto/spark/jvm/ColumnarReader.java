package epto.spark.jvm;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A task's read: each range's frames are walked and checked ({@link LogFormat.Walk}), then the
 * columns the query uses, and only those, are filled from the segment's bytes into column
 * vectors, {@link #BATCH_ROWS} rows at a time. A query that uses no column ({@code count()})
 * gets batches without columns: the frames are still read and checked.
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  static final int BATCH_ROWS = 8192;

  private static final String[] NAMES = {
    "node", "offset", "source", "seq", "ts", "tag", "payload", "delivered_at", "broadcast_at",
    "signature"
  };
  private static final byte[] IN_ORDER = "in-order".getBytes(StandardCharsets.UTF_8);
  private static final byte[] OUT_OF_ORDER = "out-of-order".getBytes(StandardCharsets.UTF_8);

  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final String[] columns;
    private final boolean failOnDataLoss;

    Factory(String[] columns, boolean failOnDataLoss) {
      this.columns = columns;
      this.failOnDataLoss = failOnDataLoss;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("the epto-jvm source reads columnar batches");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new ColumnarReader((EptoLogSource.LogPartition) partition, columns, failOnDataLoss);
    }
  }

  private final EptoLogSource.LogPartition part;
  private final boolean failOnDataLoss;
  private final int[] kinds;
  private final WritableColumnVector[] vectors;
  private final ColumnarBatch batch;
  private int range = -1;
  private LogFormat.Walk walk;
  private LogFormat.Chunk chunk;
  private int at;

  ColumnarReader(EptoLogSource.LogPartition part, String[] columns, boolean failOnDataLoss) {
    this.part = part;
    this.failOnDataLoss = failOnDataLoss;
    this.kinds = new int[columns.length];
    this.vectors = new WritableColumnVector[columns.length];
    for (int c = 0; c < columns.length; c++) {
      kinds[c] = java.util.Arrays.asList(NAMES).indexOf(columns[c]);
      vectors[c] = new OnHeapColumnVector(BATCH_ROWS, typeOf(kinds[c]));
    }
    this.batch = new ColumnarBatch(vectors);
  }

  private static DataType typeOf(int kind) {
    switch (kind) {
      case 5:
        return DataTypes.StringType;
      case 6:
      case 9:
        return DataTypes.BinaryType;
      case 7:
      case 8:
        return DataTypes.TimestampType;
      default:
        return DataTypes.LongType;
    }
  }

  @Override
  public boolean next() {
    while (true) {
      if (chunk != null && at < chunk.count) {
        fill();
        return true;
      }
      chunk = null;
      if (walk != null) {
        try {
          chunk = walk.next();
        } catch (LogGapError e) { // raised only with failOnDataLoss
          throw new DataLossError(
              e.getMessage() + " (set failOnDataLoss=false to skip)", e);
        }
        at = 0;
        if (chunk != null) {
          continue;
        }
        walk = null;
      }
      if (++range >= part.nodes.length) {
        return false;
      }
      String dir = part.dirs[range];
      if (!Files.isDirectory(Paths.get(dir))) {
        throw new EptoError(
            dir
                + " is not visible on host "
                + Options.hostname()
                + ": executors read the logs at the driver's absolute path (use a file system "
                + "shared by every worker)");
      }
      try {
        walk = new LogFormat.Walk(dir, part.starts[range], part.ends[range], !failOnDataLoss);
      } catch (LogGapError e) {
        throw new DataLossError(
            e.getMessage() + " (set failOnDataLoss=false to skip)", e);
      }
    }
  }

  private void fill() {
    int n = Math.min(BATCH_ROWS, chunk.count - at);
    ByteBuffer data = chunk.data;
    int[] positions = chunk.positions;
    long node = part.nodes[range];
    for (int c = 0; c < kinds.length; c++) {
      WritableColumnVector v = vectors[c];
      v.reset();
      int kind = kinds[c];
      switch (kind) {
        case 0:
          v.putLongs(0, n, node);
          break;
        case 1: // offset, source, seq: unsigned in the log
        case 2:
        case 3:
          for (int i = 0; i < n; i++) {
            long value = LogFormat.u64(data, positions[at + i] + 8 * kind);
            if (value < 0) {
              throw new EptoError(
                  "node "
                      + node
                      + ": a "
                      + NAMES[kind]
                      + " at or above 2**63 cannot be read as a Spark BIGINT");
            }
            v.putLong(i, value);
          }
          break;
        case 4: // ts
        case 7: // delivered_at
          int field = kind == 4 ? 32 : 40;
          for (int i = 0; i < n; i++) {
            v.putLong(i, LogFormat.u64(data, positions[at + i] + field));
          }
          break;
        case 8: // broadcast_at, NULL unless the flag says it is known
          for (int i = 0; i < n; i++) {
            int p = positions[at + i];
            if ((data.get(p + 56) & LogFormat.FLAG_HAS_BROADCAST) != 0) {
              v.putLong(i, LogFormat.u64(data, p + 48));
            } else {
              v.putNull(i);
            }
          }
          break;
        case 5: // tag
          for (int i = 0; i < n; i++) {
            boolean ooo = (data.get(positions[at + i] + 56) & LogFormat.FLAG_OUT_OF_ORDER) != 0;
            byte[] tag = ooo ? OUT_OF_ORDER : IN_ORDER;
            v.putByteArray(i, tag, 0, tag.length);
          }
          break;
        case 6: // payload: after the signature, to the end of the body
          for (int i = 0; i < n; i++) {
            int p = positions[at + i];
            int from = p + 59 + LogFormat.u16(data, p + 57);
            int to = p + 8 + (int) LogFormat.u32(data, p);
            putBytes(v, i, data, from, Math.max(0, to - from));
          }
          break;
        case 9: // signature, NULL for an unsigned event
          for (int i = 0; i < n; i++) {
            int p = positions[at + i];
            int length = LogFormat.u16(data, p + 57);
            if (length == 0) {
              v.putNull(i);
            } else {
              putBytes(v, i, data, p + 59, length);
            }
          }
          break;
        default:
          throw new IllegalStateException("no column " + kind);
      }
    }
    at += n;
    batch.setNumRows(n);
  }

  private byte[] scratch = new byte[256];

  /** Row {@code i} of {@code v} is {@code length} bytes of {@code data} from {@code from}. */
  private void putBytes(WritableColumnVector v, int i, ByteBuffer data, int from, int length) {
    if (data.hasArray()) {
      v.putByteArray(i, data.array(), data.arrayOffset() + from, length);
      return;
    }
    if (scratch.length < length) {
      scratch = new byte[Math.max(length, 2 * scratch.length)];
    }
    data.get(from, scratch, 0, length);
    v.putByteArray(i, scratch, 0, length);
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() {
    for (ColumnVector v : vectors) {
      v.close();
    }
  }
}

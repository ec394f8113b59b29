package epto.spark.jvm;

/**
 * A damaged record or header in a closed segment, a damaged manifest (Python:
 * {@code epto.log.LogCorruptError}).
 * Named as the Python reader's exception, so that messages read the same from both readers.
 */
public class LogCorruptError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public LogCorruptError(String message) {
    super(message);
  }
}

package epto.spark.jvm;

/**
 * Delivery indices that should be present are not (Python: {@code epto.log.LogGapError}).
 * Named as the Python reader's exception, so that messages read the same from both readers.
 */
public class LogGapError extends LogCorruptError {
  private static final long serialVersionUID = 1L;

  public LogGapError(String message) {
    super(message);
  }
}

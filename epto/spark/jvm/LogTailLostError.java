package epto.spark.jvm;

/**
 * The log ends before the end its manifest records as durable (Python: {@code
 * epto.log.LogTailLostError}).
 * Named as the Python reader's exception, so that messages read the same from both readers.
 */
public class LogTailLostError extends LogGapError {
  private static final long serialVersionUID = 1L;

  public LogTailLostError(String message) {
    super(message);
  }
}

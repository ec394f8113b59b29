package epto.spark.jvm;

/**
 * A log directory a task cannot see, an id Spark cannot hold (Python: {@code
 * epto.EptoError}).
 * Named as the Python reader's exception, so that messages read the same from both readers.
 */
public class EptoError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public EptoError(String message) {
    super(message);
  }
}

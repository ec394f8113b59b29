package epto.spark.jvm;

/**
 * Records a query should read are gone and failOnDataLoss is true (Python: {@code
 * epto.spark._source.DataLossError}).
 * Named as the Python reader's exception, so that messages read the same from both readers.
 */
public class DataLossError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public DataLossError(String message, Throwable cause) {
    super(message, cause);
  }
}

package dev.kappa.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.AWSServiceIOException;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * A Delta {@link io.delta.storage.LogStore} for {@code s3a://} tables that several drivers commit
 * to at once: its put-if-absent is one conditional S3 PutObject ({@code If-None-Match: *}), which
 * the store refuses with 412 Precondition Failed when the key exists (AWS S3 API reference,
 * "PutObject"; "Conditional writes" in the S3 user guide). Two drivers writing
 * {@code _delta_log/<version>.json} therefore cannot both succeed: the loser gets
 * {@link FileAlreadyExistsException}, which Delta's optimistic transaction treats as a concurrent
 * commit (it re-reads the log, checks for conflicts and retries at the next version).
 *
 * <p>Delta's own {@code S3SingleDriverLogStore} checks existence and writes in two requests
 * guarded by a lock inside one JVM, so two drivers can both write the same version and the
 * second silently replaces the first: a lost commit (Delta docs, "Storage configuration",
 * "Amazon S3": "concurrent writes to the same Delta table from multiple Spark drivers can lead to
 * data loss"). Delta's multi-cluster alternative needs DynamoDB.
 *
 * <p>The conditional create is Hadoop's: S3A's {@code createFile} builder with
 * {@code fs.option.create.conditional.overwrite} (Hadoop 3.4.2, HADOOP-19256; enabled by
 * {@code fs.s3a.create.conditional.enabled}), demanded with {@code must()} so that a connector
 * that does not know the option fails instead of writing unconditionally. S3A raises
 * {@link RemoteFileChangedException} on 412; AWS answers 409 ConditionalRequestConflict to a
 * conditional write racing another on the same key (S3 user guide, "Conditional writes"), which
 * S3A raises as an {@link AWSServiceIOException} with that status. Both become
 * {@link FileAlreadyExistsException}.
 *
 * <p>Overwrites ({@code _last_checkpoint}) are plain creates. Listing is Hadoop's: S3 lists
 * strongly consistently since December 2020, so the single-driver store's cache of its own
 * writes is not needed. A PutObject is all or nothing, so a partial file is never visible.
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (overwrite) {
      try (FSDataOutputStream out = fs.create(path, true)) {
        writeLines(out, actions);
      }
      return;
    }
    FSDataOutputStream out;
    try {
      FSDataOutputStreamBuilder<FSDataOutputStream, ?> builder = fs.createFile(path);
      builder.overwrite(false);
      builder.must(Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true);
      out = builder.build();
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      // S3A's own existence check before the upload: the version is already taken.
      throw alreadyExists(path, e);
    }
    try {
      writeLines(out, actions);
    } catch (IOException | RuntimeException e) {
      out.abort();  // nothing uploaded: closing would put a partial commit
      throw e;
    }
    try {
      out.close();  // the PutObject with If-None-Match: * happens here
    } catch (RemoteFileChangedException e) {
      throw alreadyExists(path, e);
    } catch (AWSServiceIOException e) {
      if (e.statusCode() == 409) {
        throw alreadyExists(path, e);
      }
      throw e;
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }

  private static void writeLines(OutputStream out, Iterator<String> actions) throws IOException {
    while (actions.hasNext()) {
      out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
  }

  private static FileAlreadyExistsException alreadyExists(Path path, IOException cause) {
    FileAlreadyExistsException e = new FileAlreadyExistsException(path.toString());
    e.initCause(cause);
    return e;
  }
}

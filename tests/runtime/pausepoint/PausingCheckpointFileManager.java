// Test hook for the runtime kill tests (tests/runtime/pause_points.py compiles it): a
// CheckpointFileManager that pauses the JVM's writing thread at one named instant of one
// checkpoint write, so a test can SIGKILL the driver exactly there. Off unless
// STREAMJOB_PAUSE_AT names a point; never shipped in the runtime image.
//
//   STREAMJOB_PAUSE_AT   points, one a line; this hook takes the ones "<phase>:<regex>", phase one of
//                          open   the atomic write was opened (a temporary file exists, empty)
//                          write  the first bytes were written and flushed (a partial temporary file)
//                          close  the write finished (the file is in place under its final name)
//                        regex: matched (find) against the full path of the file written.
//                        Each point pauses once, the first time it is hit.
//   STREAMJOB_PAUSE_DIR  where "paused-<line number>" is written (the path) when that point is hit.
//   STREAMJOB_PAUSE_DELEGATE  the real file manager (default: Hadoop FileContext based).
package streamjob.testhooks;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream;

public class PausingCheckpointFileManager implements CheckpointFileManager {
    private static final String[] POINTS = System.getenv().getOrDefault("STREAMJOB_PAUSE_AT", "").split("\n");
    private static final AtomicBoolean[] HIT = new AtomicBoolean[POINTS.length];

    static {
        for (int i = 0; i < POINTS.length; i++) {
            HIT[i] = new AtomicBoolean(false);
        }
    }

    private final CheckpointFileManager delegate;

    public PausingCheckpointFileManager(Path path, Configuration conf) throws Exception {
        String name = System.getenv().getOrDefault(
            "STREAMJOB_PAUSE_DELEGATE",
            "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager");
        delegate = (CheckpointFileManager) Class.forName(name)
            .getConstructor(Path.class, Configuration.class).newInstance(path, conf);
    }

    /** The line number of the point this write hits in this phase, or -1; each point hits once. */
    private static int matches(Path path, String phase) {
        for (int i = 0; i < POINTS.length; i++) {
            String point = POINTS[i];
            if (point.startsWith(phase + ":")
                && Pattern.compile(point.substring(phase.length() + 1)).matcher(path.toString()).find()
                && HIT[i].compareAndSet(false, true)) {
                return i;
            }
        }
        return -1;
    }

    private static void pause(Path path, int point) {
        String dir = System.getenv("STREAMJOB_PAUSE_DIR");
        try {
            java.nio.file.Path tmp = Paths.get(dir, "paused-" + point + ".tmp");
            Files.write(tmp, (path.toString() + "\n").getBytes(StandardCharsets.UTF_8));
            Files.move(tmp, Paths.get(dir, "paused-" + point));
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        while (true) {
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                // a pause ends only with the process
            }
        }
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        CancellableFSDataOutputStream inner = delegate.createAtomic(path, overwriteIfPossible);
        int opened = matches(path, "open");
        if (opened >= 0) {
            pause(path, opened);
        }
        int onWrite = matches(path, "write");
        int onClose = onWrite >= 0 ? -1 : matches(path, "close");
        if (onWrite < 0 && onClose < 0) {
            return inner;
        }
        boolean pauseOnWrite = onWrite >= 0;
        OutputStream forward = new OutputStream() {
            private boolean written;

            @Override
            public void write(int b) throws IOException {
                write(new byte[] {(byte) b}, 0, 1);
            }

            @Override
            public void write(byte[] b, int off, int len) throws IOException {
                inner.write(b, off, len);
                if (pauseOnWrite && !written) {
                    written = true;
                    inner.hflush();
                    pause(path, onWrite);
                }
            }

            @Override
            public void flush() throws IOException {
                inner.flush();
            }
        };
        return new CancellableFSDataOutputStream(forward) {
            @Override
            public void cancel() {
                inner.cancel();
            }

            @Override
            public void close() throws IOException {
                inner.close();
                if (onClose >= 0) {
                    pause(path, onClose);
                }
            }
        };
    }

    @Override
    public FSDataInputStream open(Path path) {
        return delegate.open(path);
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        return delegate.list(path, filter);
    }

    @Override
    public void mkdirs(Path path) {
        delegate.mkdirs(path);
    }

    @Override
    public boolean exists(Path path) {
        return delegate.exists(path);
    }

    @Override
    public void delete(Path path) {
        delegate.delete(path);
    }

    @Override
    public boolean isLocal() {
        return delegate.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        return delegate.createCheckpointDirectory();
    }

    @Override
    public void close() {
        delegate.close();
    }
}

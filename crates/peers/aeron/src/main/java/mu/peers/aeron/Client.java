package mu.peers.aeron;

import io.aeron.AeronVersion;
import io.aeron.cluster.client.AeronCluster;
import io.aeron.cluster.client.EgressListener;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import io.aeron.logbuffer.Header;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.YieldingIdleStrategy;

/**
 * A cluster client that times one message at a time, driven through its standard streams.
 *
 * <p>Arguments: the cluster's ingress endpoints in Aeron's format ({@code 0=host:port,1=...}) and
 * a directory for the client's own media driver.
 *
 * <p>Once connected it prints {@code ready <version>}. Then, for each line read from standard
 * input, it sends the line's bytes as one message, waits for the service's echo, checks that the
 * echo has the same bytes, and prints the time from before the send until the echo arrived in
 * nanoseconds; or {@code error <reason>}. It closes the session and exits at the end of input.
 */
public final class Client implements EgressListener {
    /** How long one message may wait for its echo before the run is reported as stuck. */
    private static final long ECHO_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);

    /** How long connecting (finding the leader, opening a session) may take. */
    private static final long CONNECT_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(20);

    private byte[] echo;

    private Client() {}

    @Override
    public void onMessage(
            final long clusterSessionId,
            final long timestamp,
            final DirectBuffer buffer,
            final int offset,
            final int length,
            final Header header) {
        final byte[] received = new byte[length];
        buffer.getBytes(offset, received);
        echo = received;
    }

    public static void main(final String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: Client <ingress endpoints> <directory>");
            System.exit(2);
        }
        Member.exitWithParent();
        final String aeronDir = new File(args[1], "aeron").getAbsolutePath();
        final PrintStream out =
                new PrintStream(System.out, false, StandardCharsets.US_ASCII);
        final Client client = new Client();
        try (MediaDriver driver =
                        MediaDriver.launchEmbedded(
                                new MediaDriver.Context()
                                        .aeronDirectoryName(aeronDir)
                                        .threadingMode(ThreadingMode.SHARED)
                                        .dirDeleteOnStart(true)
                                        .dirDeleteOnShutdown(true));
                AeronCluster cluster =
                        AeronCluster.connect(
                                new AeronCluster.Context()
                                        .aeronDirectoryName(driver.aeronDirectoryName())
                                        .egressListener(client)
                                        .egressChannel("aeron:udp?endpoint=127.0.0.1:0")
                                        .ingressChannel("aeron:udp")
                                        .ingressEndpoints(args[0])
                                        .messageTimeoutNs(CONNECT_TIMEOUT_NS))) {
            out.println(
                    "ready Aeron Cluster "
                            + AeronVersion.VERSION
                            + " (Java "
                            + Runtime.version()
                            + ")");
            out.flush();
            client.serve(cluster, out);
        }
    }

    private void serve(final AeronCluster cluster, final PrintStream out) throws IOException {
        final BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        final UnsafeBuffer message = new UnsafeBuffer(new byte[0]);
        // Yielding rather than spinning: the members share this machine's few cores with the
        // client, and a spinning client would take a core from them.
        final IdleStrategy idle = new YieldingIdleStrategy();
        String line;
        while ((line = in.readLine()) != null) {
            final byte[] bytes = line.getBytes(StandardCharsets.US_ASCII);
            message.wrap(bytes);
            echo = null;
            final long startNs = System.nanoTime();
            final long deadlineNs = startNs + ECHO_TIMEOUT_NS;
            String error = null;
            while (cluster.offer(message, 0, bytes.length) < 0 && error == null) {
                idle.idle(cluster.pollEgress());
                error = System.nanoTime() > deadlineNs ? "offer back-pressured for 10 s" : null;
            }
            while (echo == null && error == null) {
                idle.idle(cluster.pollEgress());
                error = System.nanoTime() > deadlineNs ? "no echo within 10 s" : null;
            }
            final long latencyNs = System.nanoTime() - startNs;
            if (error == null && !Arrays.equals(echo, bytes)) {
                error = "the echo differs from the message";
            }
            out.println(error == null ? Long.toString(latencyNs) : "error " + error);
            out.flush();
            if (error != null) {
                return;
            }
        }
    }
}

package mu.peers.aeron;

import io.aeron.archive.Archive;
import io.aeron.archive.ArchiveThreadingMode;
import io.aeron.archive.client.AeronArchive;
import io.aeron.cluster.ClusteredMediaDriver;
import io.aeron.cluster.ConsensusModule;
import io.aeron.cluster.service.Cluster;
import io.aeron.cluster.service.ClusteredServiceContainer;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.agrona.ErrorHandler;
import org.agrona.concurrent.NoOpLock;

/**
 * One cluster member in one JVM: a media driver, an archive and a consensus module (together a
 * clustered media driver) and a service container running {@link EchoService}, all on loopback
 * and under one private directory.
 *
 * <p>Arguments: member id, the cluster's members in Aeron's format
 * ({@code id,ingress,consensus,log,catchup,archive|...}), this member's archive control port, a
 * loopback TCP port for the control protocol below, and the member's directory.
 *
 * <p>Control protocol, one line per request on a TCP connection to the control port:
 * {@code role} answers {@code LEADER}, {@code FOLLOWER}, {@code CANDIDATE} or {@code NONE} (the
 * service has not started); {@code applied} answers the count of messages the service applied
 * and the last one in hexadecimal, separated by a space.
 */
public final class Member {
    private static final String HOST = "127.0.0.1";

    /** Term length of the log and of the archive's control streams: small, as the runs are. */
    private static final String TERM_LENGTH = "term-length=1m";

    /** How often the member checks that the process that started it is still there. */
    private static final long PARENT_CHECK_INTERVAL_MS = 500;

    private Member() {}

    public static void main(final String[] args) throws IOException {
        if (args.length != 5) {
            System.err.println(
                    "usage: Member <member id> <cluster members> <archive port> <control port>"
                            + " <directory>");
            System.exit(2);
        }
        final int memberId = Integer.parseInt(args[0]);
        final String clusterMembers = args[1];
        final int archivePort = Integer.parseInt(args[2]);
        final int controlPort = Integer.parseInt(args[3]);
        final File dir = new File(args[4]);
        exitWithParent();

        final String aeronDir = new File(dir, "aeron").getAbsolutePath();
        final MediaDriver.Context driver =
                new MediaDriver.Context()
                        .aeronDirectoryName(aeronDir)
                        .threadingMode(ThreadingMode.SHARED)
                        .termBufferSparseFile(true)
                        .dirDeleteOnStart(true)
                        .dirDeleteOnShutdown(true)
                        .errorHandler(errorHandler("media driver"));
        final Archive.Context archive =
                new Archive.Context()
                        .aeronDirectoryName(aeronDir)
                        .archiveDir(new File(dir, "archive"))
                        .deleteArchiveOnStart(true)
                        .controlChannel(
                                "aeron:udp?endpoint=" + HOST + ":" + archivePort + "|" + TERM_LENGTH)
                        .localControlChannel("aeron:ipc?term-length=64k")
                        .replicationChannel("aeron:udp?endpoint=" + HOST + ":0")
                        .archiveClientContext(
                                new AeronArchive.Context()
                                        .controlResponseChannel(
                                                "aeron:udp?endpoint=" + HOST + ":0"))
                        .recordingEventsEnabled(false)
                        .threadingMode(ArchiveThreadingMode.SHARED)
                        .errorHandler(errorHandler("archive"));
        final AeronArchive.Context archiveClient =
                new AeronArchive.Context()
                        .lock(NoOpLock.INSTANCE)
                        .controlRequestChannel(archive.localControlChannel())
                        .controlRequestStreamId(archive.localControlStreamId())
                        .controlResponseChannel(archive.localControlChannel())
                        .aeronDirectoryName(aeronDir);
        final File clusterDir = new File(dir, "cluster");
        final ConsensusModule.Context consensus =
                new ConsensusModule.Context()
                        .clusterMemberId(memberId)
                        .clusterMembers(clusterMembers)
                        .clusterDir(clusterDir)
                        .deleteDirOnStart(true)
                        .ingressChannel("aeron:udp")
                        .logChannel("aeron:udp?" + TERM_LENGTH)
                        .replicationChannel("aeron:udp?endpoint=" + HOST + ":0")
                        .archiveContext(archiveClient.clone())
                        .errorHandler(errorHandler("consensus module"));
        final EchoService service = new EchoService();
        final ClusteredServiceContainer.Context container =
                new ClusteredServiceContainer.Context()
                        .aeronDirectoryName(aeronDir)
                        .archiveContext(archiveClient.clone())
                        .clusterDir(clusterDir)
                        .clusteredService(service)
                        .errorHandler(errorHandler("service container"));

        try (ClusteredMediaDriver ignoredDriver =
                        ClusteredMediaDriver.launch(driver, archive, consensus);
                ClusteredServiceContainer ignoredContainer =
                        ClusteredServiceContainer.launch(container)) {
            System.out.println("member " + memberId + " started; control port " + controlPort);
            serveControl(controlPort, service);
        }
    }

    /** Answers control requests until the process is killed. */
    private static void serveControl(final int port, final EchoService service) throws IOException {
        try (ServerSocket server = new ServerSocket(port, 8, InetAddress.getByName(HOST))) {
            while (true) {
                try (Socket socket = server.accept()) {
                    answer(socket, service);
                } catch (final IOException error) {
                    // One broken connection says nothing about the member: serve the next.
                    System.err.println("control connection: " + error);
                }
            }
        }
    }

    private static void answer(final Socket socket, final EchoService service) throws IOException {
        final BufferedReader in =
                new BufferedReader(
                        new InputStreamReader(socket.getInputStream(), StandardCharsets.US_ASCII));
        final Writer out =
                new OutputStreamWriter(socket.getOutputStream(), StandardCharsets.US_ASCII);
        String request;
        while ((request = in.readLine()) != null) {
            switch (request) {
                case "role" -> {
                    final Cluster.Role role = service.role();
                    out.write(role == null ? "NONE" : role.name());
                }
                case "applied" -> {
                    final EchoService.Applied applied = service.applied();
                    out.write(applied.count() + " " + HexFormat.of().formatHex(applied.last()));
                }
                default -> out.write("ERROR unknown request " + request);
            }
            out.write('\n');
            out.flush();
        }
    }

    /**
     * Ends this JVM when the process that started it is gone, so that a benchmark killed before
     * it could stop its members leaves none running.
     */
    static void exitWithParent() {
        final ProcessHandle parent = ProcessHandle.current().parent().orElse(null);
        final Thread watcher =
                new Thread(
                        () -> {
                            while (parent == null || parent.isAlive()) {
                                try {
                                    Thread.sleep(PARENT_CHECK_INTERVAL_MS);
                                } catch (final InterruptedException error) {
                                    return;
                                }
                            }
                            Runtime.getRuntime().halt(3);
                        },
                        "parent-watcher");
        watcher.setDaemon(true);
        watcher.start();
    }

    private static ErrorHandler errorHandler(final String component) {
        return error -> {
            System.err.println(component + ": " + error);
            error.printStackTrace(System.err);
        };
    }
}

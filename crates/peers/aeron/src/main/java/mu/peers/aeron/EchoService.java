package mu.peers.aeron;

import io.aeron.ExclusivePublication;
import io.aeron.Image;
import io.aeron.cluster.codecs.CloseReason;
import io.aeron.cluster.service.ClientSession;
import io.aeron.cluster.service.Cluster;
import io.aeron.cluster.service.ClusteredService;
import io.aeron.logbuffer.Header;
import org.agrona.DirectBuffer;

/**
 * The clustered service: it answers each message with the same bytes and remembers the last one
 * it applied and how many it applied, so that every member can be asked whether the last write
 * reached it.
 *
 * <p>Aeron Cluster hands a message to the service only once the consensus module knows it is
 * committed (appended to a majority of the members' logs), on every member; only the leader's
 * replies reach the client. So an echo the client receives means the message was committed.
 */
final class EchoService implements ClusteredService {
    private Cluster cluster;

    // Written on the service's thread, read by the member's control thread.
    private volatile Cluster.Role role;
    private volatile Applied applied = new Applied(0, new byte[0]);

    /** What the service has applied: how many messages, and the bytes of the last one. */
    record Applied(long count, byte[] last) {}

    Cluster.Role role() {
        return role;
    }

    Applied applied() {
        return applied;
    }

    @Override
    public void onStart(final Cluster cluster, final Image snapshotImage) {
        // A run starts a fresh cluster and never takes a snapshot, so there is none to load.
        if (snapshotImage != null) {
            throw new IllegalStateException("the echo service takes no snapshots");
        }
        this.cluster = cluster;
        this.role = cluster.role();
    }

    @Override
    public void onSessionOpen(final ClientSession session, final long timestamp) {}

    @Override
    public void onSessionClose(
            final ClientSession session, final long timestamp, final CloseReason closeReason) {}

    @Override
    public void onSessionMessage(
            final ClientSession session,
            final long timestamp,
            final DirectBuffer buffer,
            final int offset,
            final int length,
            final Header header) {
        final byte[] message = new byte[length];
        buffer.getBytes(offset, message);
        applied = new Applied(applied.count() + 1, message);
        // On a follower the session's offer does nothing and succeeds; on the leader it can be
        // back-pressured, and the echo must not be lost.
        while (session.offer(buffer, offset, length) < 0) {
            cluster.idleStrategy().idle();
        }
    }

    @Override
    public void onTimerEvent(final long correlationId, final long timestamp) {}

    @Override
    public void onTakeSnapshot(final ExclusivePublication snapshotPublication) {
        throw new IllegalStateException("the echo service takes no snapshots");
    }

    @Override
    public void onRoleChange(final Cluster.Role newRole) {
        role = newRole;
    }

    @Override
    public void onTerminate(final Cluster cluster) {}
}

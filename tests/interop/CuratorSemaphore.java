// Apache Curator's InterProcessSemaphoreV2 on seckill's payment semaphore path, to prove the
// two count against the same N. Run with Java's source launcher (no build step):
//   java -cp <curator and zookeeper jars> CuratorSemaphore.java <connect> <path> <maxLeases> hold
//       acquires a lease, prints "acquired", returns it when a line arrives on stdin, prints "released"
//   java -cp ... CuratorSemaphore.java <connect> <path> <maxLeases> try <millis>
//       prints "acquired" (and returns it) or "timeout"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import java.util.List;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorSemaphore {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], mode = args[3];
        int maxLeases = Integer.parseInt(args[2]);
        CuratorFramework client = client(connect);
        client.start();
        client.blockUntilConnected();
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, maxLeases);
        if (mode.equals("hold")) {
            Lease lease = semaphore.acquire();
            System.out.println("acquired");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            semaphore.returnLease(lease);
            System.out.println("released");
        } else {
            Lease lease = semaphore.acquire(Long.parseLong(args[4]), TimeUnit.MILLISECONDS);
            System.out.println(lease != null ? "acquired" : "timeout");
            if (lease != null) semaphore.returnLease(lease);
        }
        System.out.flush();
        client.close();
    }

    // With SECKILL_ZK_AUTH (user:password) set, as the service's instances do: digest auth,
    // and every node made readable and writable by those credentials only.
    static CuratorFramework client(String connect) {
        String auth = System.getenv("SECKILL_ZK_AUTH");
        CuratorFrameworkFactory.Builder builder = CuratorFrameworkFactory.builder()
            .connectString(connect).retryPolicy(new RetryOneTime(100));
        if (auth != null && !auth.isEmpty()) {
            builder.authorization("digest", auth.getBytes()).aclProvider(new ACLProvider() {
                public List<ACL> getDefaultAcl() { return ZooDefs.Ids.CREATOR_ALL_ACL; }
                public List<ACL> getAclForPath(String path) { return ZooDefs.Ids.CREATOR_ALL_ACL; }
            });
        }
        return builder.build();
    }
}

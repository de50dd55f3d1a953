// Apache Curator's InterProcessReadWriteLock on a seckill product's terms lock path, to prove
// the two share and exclude as one lock. Run with Java's source launcher (no build step):
//   java -cp <curator and zookeeper jars> CuratorRwLock.java <connect> <path> read|write hold
//       takes that side, prints "acquired", releases when a line arrives on stdin, prints "released"
//   java -cp ... CuratorRwLock.java <connect> <path> read|write try <millis>
//       prints "acquired" (and releases) or "timeout"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import java.util.List;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public class CuratorRwLock {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], side = args[2], mode = args[3];
        CuratorFramework client = client(connect);
        client.start();
        client.blockUntilConnected();
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        InterProcessMutex lock = side.equals("read") ? rw.readLock() : rw.writeLock();
        if (mode.equals("hold")) {
            lock.acquire();
            System.out.println("acquired");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            lock.release();
            System.out.println("released");
        } else {
            boolean acquired = lock.acquire(Long.parseLong(args[4]), TimeUnit.MILLISECONDS);
            System.out.println(acquired ? "acquired" : "timeout");
            if (acquired) lock.release();
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

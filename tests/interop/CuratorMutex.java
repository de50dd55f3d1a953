// Apache Curator's InterProcessMutex on a seckill lock path, to prove the two interoperate.
// Run with Java's source launcher (no build step):
//   java -cp <curator and zookeeper jars> CuratorMutex.java <connect> <path> hold
//       acquires, prints "acquired", releases when a line arrives on stdin, prints "released"
//   java -cp ... CuratorMutex.java <connect> <path> try <millis>
//       prints "acquired" (and releases) or "timeout"
//   java -cp ... CuratorMutex.java <connect> <path> bench <contenders> <seconds>
//       loadtest/bench: <contenders> threads, one InterProcessMutex each on one client,
//       acquire and release in a loop; prints "handoffs <n> seconds <s>"
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
import org.apache.curator.retry.RetryOneTime;

public class CuratorMutex {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], mode = args[2];
        CuratorFramework client = client(connect);
        client.start();
        client.blockUntilConnected();
        if (mode.equals("bench")) {
            bench(client, path, Integer.parseInt(args[3]), Double.parseDouble(args[4]));
            client.close();
            return;
        }
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        if (mode.equals("hold")) {
            mutex.acquire();
            System.out.println("acquired");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            mutex.release();
            System.out.println("released");
        } else {
            boolean acquired = mutex.acquire(Long.parseLong(args[3]), TimeUnit.MILLISECONDS);
            System.out.println(acquired ? "acquired" : "timeout");
            if (acquired) mutex.release();
        }
        System.out.flush();
        client.close();
    }

    static void bench(CuratorFramework client, String path, int contenders, double seconds)
            throws Exception {
        java.util.concurrent.atomic.AtomicLong handoffs = new java.util.concurrent.atomic.AtomicLong();
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        Thread[] threads = new Thread[contenders];
        for (int i = 0; i < contenders; i++) {
            threads[i] = new Thread(() -> {
                InterProcessMutex mutex = new InterProcessMutex(client, path);
                try {
                    while (System.nanoTime() < deadline) {
                        mutex.acquire();
                        handoffs.incrementAndGet();
                        mutex.release();
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
        }
        long start = System.nanoTime();
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join();
        double elapsed = (System.nanoTime() - start) / 1e9;
        System.out.println("handoffs " + handoffs.get() + " seconds " + elapsed);
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

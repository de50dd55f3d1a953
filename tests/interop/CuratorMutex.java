// Apache Curator's InterProcessMutex on a seckill lock path, to prove the two interoperate.
// Run with Java's source launcher (no build step):
//   java -cp <curator and zookeeper jars> CuratorMutex.java <connect> <path> hold
//       acquires, prints "acquired", releases when a line arrives on stdin, prints "released"
//   java -cp ... CuratorMutex.java <connect> <path> try <millis>
//       prints "acquired" (and releases) or "timeout"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorMutex {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], mode = args[2];
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
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
}

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;

/**
 * Kafka's Java AdminClient creating topics in one call, with its own defaults: a topic refused with
 * THROTTLING_QUOTA_EXCEEDED is asked for again once the throttle has run out (KIP-599,
 * CreateTopicsOptions.retryOnQuotaViolation, true unless a tool turns it off as kafka-topics does).
 * Prints "created <ms since the call> <topic>" for each topic as it is created.
 *
 * Run by tests/fidelity.py with Java's source launcher: java -cp 'lib/*' CreateTopics.java
 * <bootstrap> <client id> <topic prefix> <topics> <partitions each>
 */
public final class CreateTopics {
    public static void main(String[] args) throws InterruptedException {
        Properties config = new Properties();
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        config.put(AdminClientConfig.CLIENT_ID_CONFIG, args[1]);
        int topics = Integer.parseInt(args[3]);
        int partitions = Integer.parseInt(args[4]);
        List<NewTopic> wanted = new ArrayList<>();
        for (int i = 0; i < topics; i++) {
            wanted.add(new NewTopic(args[2] + "-" + i, partitions, (short) 1));
        }
        try (Admin admin = Admin.create(config)) {
            long started = System.nanoTime();
            CreateTopicsResult result = admin.createTopics(wanted);
            result.values().forEach((topic, created) -> created.whenComplete((ignored, error) -> {
                long ms = (System.nanoTime() - started) / 1_000_000;
                System.out.println(error == null ? "created " + ms + " " + topic : "failed " + ms + " " + topic + " " + error);
            }));
            try {
                result.all().get();
            } catch (ExecutionException error) {
                System.err.println("createTopics failed: " + error.getCause());
                System.exit(1);
            }
        }
    }
}

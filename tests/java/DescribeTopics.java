import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicCollection;

/**
 * Kafka's Java AdminClient describing topics by name (DescribeTopicPartitions, its cursor paging a partition at a
 * time) logged in with PLAIN, printing one line a topic, in the order given: its name, id, partitions and the
 * operations it may do, or the error the client reports for it.
 *
 * Arguments: bootstrap user password topic...
 * Run by tests/integration/test_authorizer.py with Java's source launcher: java -cp 'lib/*' DescribeTopics.java ...
 */
public final class DescribeTopics {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        config.put("security.protocol", "SASL_PLAINTEXT");
        config.put("sasl.mechanism", "PLAIN");
        config.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                   + args[1] + "\" password=\"" + args[2] + "\";");
        List<String> topics = List.of(args).subList(3, args.length);
        try (Admin admin = Admin.create(config)) {
            Map<String, KafkaFuture<TopicDescription>> described = admin.describeTopics(
                TopicCollection.ofTopicNames(topics),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(1).includeAuthorizedOperations(true))
                .topicNameValues();
            for (String topic : topics) {
                try {
                    TopicDescription description = described.get(topic).get();
                    List<Integer> partitions = new ArrayList<>();
                    description.partitions().forEach(partition -> partitions.add(partition.partition()));
                    System.out.println(topic + " " + description.topicId() + " " + partitions + " "
                                       + new TreeSet<>(description.authorizedOperations()));
                } catch (ExecutionException error) {
                    System.out.println(topic + " " + error.getCause().getClass().getSimpleName());
                }
            }
        }
    }
}

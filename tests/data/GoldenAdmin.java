// Drives the Java AdminClient through every guarded admin API, for tests/data/capture_golden.py.
// Run: java -cp <kafka classpath> GoldenAdmin.java <bootstrap servers>

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;

public class GoldenAdmin {
    // Errors are expected for some calls (e.g. cancelling a reassignment that is not running):
    // only the request bytes matter here.
    static void settle(String what, KafkaFuture<?> future) throws InterruptedException {
        try {
            future.get();
            System.out.println(what + ": ok");
        } catch (ExecutionException e) {
            System.out.println(what + ": " + e.getCause());
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "golden-java");
        try (Admin admin = Admin.create(props)) {
            settle("create", admin.createTopics(List.of(
                new NewTopic("java-plain", 3, (short) 1),
                new NewTopic("java-configs", Optional.empty(), Optional.empty())
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact")),
                new NewTopic("java-assigned", Map.of(0, List.of(1), 1, List.of(1))))).all());
            settle("create validate-only", admin.createTopics(
                List.of(new NewTopic("java-validate", 1, (short) 1)),
                new CreateTopicsOptions().validateOnly(true)).all());

            settle("create partitions", admin.createPartitions(Map.of(
                "java-plain", NewPartitions.increaseTo(4),
                "java-assigned", NewPartitions.increaseTo(3, List.of(List.of(1))))).all());

            ConfigResource plain = new ConfigResource(ConfigResource.Type.TOPIC, "java-plain");
            ConfigResource configs = new ConfigResource(ConfigResource.Type.TOPIC, "java-configs");
            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            settle("incremental alter configs", admin.incrementalAlterConfigs(Map.of(
                plain, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)),
                configs, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SUBTRACT)),
                cluster, List.of(
                    new AlterConfigOp(new ConfigEntry("log.cleaner.threads", "1"), AlterConfigOp.OpType.SET))),
                new AlterConfigsOptions().validateOnly(true)).all());
            settle("incremental alter configs (applied)", admin.incrementalAlterConfigs(Map.of(
                plain, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all());

            TopicPartition p0 = new TopicPartition("java-plain", 0);
            settle("reassign", admin.alterPartitionReassignments(Map.of(
                p0, Optional.of(new NewPartitionReassignment(List.of(1))))).all());
            settle("cancel reassignment", admin.alterPartitionReassignments(Map.of(
                new TopicPartition("java-plain", 1), Optional.empty())).all());

            settle("delete records", admin.deleteRecords(Map.of(
                p0, RecordsToDelete.beforeOffset(0L),
                new TopicPartition("java-plain", 1), RecordsToDelete.beforeOffset(0L))).all());

            settle("delete by name", admin.deleteTopics(List.of("java-configs")).all());
            Uuid id = admin.describeTopics(List.of("java-assigned")).allTopicNames().get()
                .get("java-assigned").topicId();
            settle("delete by id", admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all());
            settle("delete rest", admin.deleteTopics(List.of("java-plain")).all());
        }
    }
}

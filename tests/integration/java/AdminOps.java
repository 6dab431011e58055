// The Java AdminClient as a long-lived JSON-lines server for tests/integration/admin_clients.py.
// Run: java -cp <kafka classpath> tests/integration/java/AdminOps.java
// Reads one command per line on stdin, e.g. {"id": 1, "op": "delete_topics", "names": ["a"]},
// and writes one result per line on stdout: {"id": 1, "ok": true, "results": [...]}, where each
// result is {"topic", "ok"} or {"topic", "ok": false, "error", "kafka_error", "message"}, in
// request order; a command that fails as a whole answers {"id", "ok": false, "error", "message"}.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnknownServerException;
import org.apache.kafka.common.protocol.Errors;

public class AdminOps {
    static final ObjectMapper JSON = new ObjectMapper();
    static Admin admin;

    public static void main(String[] args) throws Exception {
        // The protocol owns the real stdout; anything else that prints (logging) goes to stderr.
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode reply = JSON.createObjectNode();
            try {
                JsonNode command = JSON.readTree(line);
                reply.set("id", command.get("id"));
                reply.put("ok", true);
                reply.set("results", run(command));
            } catch (Exception e) {
                Throwable root = e;
                while (root.getCause() != null) {
                    root = root.getCause();
                }
                String message = String.valueOf(e.getMessage());
                if (root != e) {
                    message += " (caused by " + root.getClass().getSimpleName() + ": " + root.getMessage() + ")";
                }
                reply.put("ok", false);
                reply.put("error", e.getClass().getSimpleName());
                reply.put("message", message);
            }
            out.println(JSON.writeValueAsString(reply));
        }
        if (admin != null) {
            admin.close();
        }
    }

    static JsonNode run(JsonNode command) throws Exception {
        String op = command.path("op").asText();
        if (op.equals("configure")) {
            return configure(command);
        }
        if (admin == null) {
            throw new IllegalStateException("send `configure` first");
        }
        boolean validateOnly = command.path("validate_only").asBoolean(false);
        switch (op) {
            case "create_topics": return createTopics(command.path("topics"), validateOnly);
            case "create_partitions": return createPartitions(command.path("topics"), validateOnly);
            case "incremental_alter_configs": return alterConfigs(command.path("resources"), validateOnly);
            case "alter_partition_reassignments": return reassign(command.path("partitions"));
            case "delete_topics": return deleteTopics(command);
            case "delete_records": return deleteRecords(command.path("partitions"));
            case "describe_topics": return describeTopics(command.path("names"));
            case "topic_id": return topicId(command.path("name").asText());
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }

    static JsonNode configure(JsonNode command) {
        if (admin != null) {
            admin.close();
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, command.path("bootstrap").asText());
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "admin-ops-java");
        command.path("properties").properties().forEach(e -> props.put(e.getKey(), e.getValue().asText()));
        admin = Admin.create(props);
        return JSON.createArrayNode();
    }

    static JsonNode createTopics(JsonNode topics, boolean validateOnly) throws InterruptedException {
        List<NewTopic> newTopics = new ArrayList<>();
        List<String> names = new ArrayList<>();
        for (JsonNode t : topics) {
            String name = t.path("name").asText();
            NewTopic topic;
            if (t.hasNonNull("assignment")) {
                Map<Integer, List<Integer>> assignment = new LinkedHashMap<>();
                t.get("assignment").properties().forEach(
                    e -> assignment.put(Integer.parseInt(e.getKey()), ints(e.getValue())));
                topic = new NewTopic(name, assignment);
            } else {
                topic = new NewTopic(name,
                    t.hasNonNull("partitions") ? Optional.of(t.get("partitions").asInt()) : Optional.empty(),
                    t.hasNonNull("replication_factor")
                        ? Optional.of((short) t.get("replication_factor").asInt()) : Optional.empty());
            }
            Map<String, String> configs = new LinkedHashMap<>();
            t.path("configs").properties().forEach(e -> configs.put(e.getKey(), e.getValue().asText()));
            newTopics.add(topic.configs(configs));
            names.add(name);
        }
        Map<String, KafkaFuture<Void>> futures =
            admin.createTopics(newTopics, new CreateTopicsOptions().validateOnly(validateOnly)).values();
        ArrayNode results = JSON.createArrayNode();
        for (String name : names) {
            results.add(outcome(name, futures.get(name)));
        }
        return results;
    }

    static JsonNode createPartitions(JsonNode topics, boolean validateOnly) throws InterruptedException {
        Map<String, NewPartitions> increases = new LinkedHashMap<>();
        for (JsonNode t : topics) {
            int total = t.path("total").asInt();
            List<List<Integer>> assignment = new ArrayList<>();
            t.path("assignment").forEach(replicas -> assignment.add(ints(replicas)));
            increases.put(t.path("name").asText(), t.hasNonNull("assignment")
                ? NewPartitions.increaseTo(total, assignment) : NewPartitions.increaseTo(total));
        }
        Map<String, KafkaFuture<Void>> futures =
            admin.createPartitions(increases, new CreatePartitionsOptions().validateOnly(validateOnly)).values();
        ArrayNode results = JSON.createArrayNode();
        for (String name : increases.keySet()) {
            results.add(outcome(name, futures.get(name)));
        }
        return results;
    }

    static JsonNode alterConfigs(JsonNode resources, boolean validateOnly) throws InterruptedException {
        Map<ConfigResource, java.util.Collection<AlterConfigOp>> changes = new LinkedHashMap<>();
        for (JsonNode r : resources) {
            List<AlterConfigOp> ops = new ArrayList<>();
            for (JsonNode o : r.path("ops")) {
                String value = o.hasNonNull("value") ? o.get("value").asText() : null;
                ops.add(new AlterConfigOp(new ConfigEntry(o.path("name").asText(), value),
                    AlterConfigOp.OpType.valueOf(o.path("op").asText())));
            }
            changes.put(new ConfigResource(ConfigResource.Type.TOPIC, r.path("topic").asText()), ops);
        }
        Map<ConfigResource, KafkaFuture<Void>> futures =
            admin.incrementalAlterConfigs(changes, new AlterConfigsOptions().validateOnly(validateOnly)).values();
        ArrayNode results = JSON.createArrayNode();
        for (ConfigResource resource : changes.keySet()) {
            results.add(outcome(resource.name(), futures.get(resource)));
        }
        return results;
    }

    static JsonNode reassign(JsonNode partitions) throws InterruptedException {
        Map<TopicPartition, Optional<NewPartitionReassignment>> changes = new LinkedHashMap<>();
        for (JsonNode p : partitions) {
            TopicPartition tp = new TopicPartition(p.path("topic").asText(), p.path("partition").asInt());
            changes.put(tp, p.hasNonNull("replicas")
                ? Optional.of(new NewPartitionReassignment(ints(p.get("replicas")))) : Optional.empty());
        }
        return perTopic(admin.alterPartitionReassignments(changes).values());
    }

    static JsonNode deleteRecords(JsonNode partitions) throws InterruptedException {
        Map<TopicPartition, RecordsToDelete> offsets = new LinkedHashMap<>();
        for (JsonNode p : partitions) {
            offsets.put(new TopicPartition(p.path("topic").asText(), p.path("partition").asInt()),
                RecordsToDelete.beforeOffset(p.path("offset").asLong()));
        }
        return perTopic(admin.deleteRecords(offsets).lowWatermarks());
    }

    static JsonNode deleteTopics(JsonNode command) throws InterruptedException {
        ArrayNode results = JSON.createArrayNode();
        if (command.has("ids")) {
            List<Uuid> ids = new ArrayList<>();
            command.get("ids").forEach(id -> ids.add(Uuid.fromString(id.asText())));
            Map<Uuid, KafkaFuture<Void>> futures =
                admin.deleteTopics(TopicCollection.ofTopicIds(ids)).topicIdValues();
            for (Uuid id : ids) {
                results.add(outcome(id.toString(), futures.get(id)));
            }
        } else {
            List<String> names = new ArrayList<>();
            command.path("names").forEach(name -> names.add(name.asText()));
            Map<String, KafkaFuture<Void>> futures =
                admin.deleteTopics(TopicCollection.ofTopicNames(names)).topicNameValues();
            for (String name : names) {
                results.add(outcome(name, futures.get(name)));
            }
        }
        return results;
    }

    static JsonNode describeTopics(JsonNode namesNode) throws InterruptedException {
        List<String> names = new ArrayList<>();
        namesNode.forEach(name -> names.add(name.asText()));
        Map<String, KafkaFuture<TopicDescription>> topics = admin.describeTopics(names).topicNameValues();
        List<ConfigResource> resources = new ArrayList<>();
        names.forEach(name -> resources.add(new ConfigResource(ConfigResource.Type.TOPIC, name)));
        Map<ConfigResource, KafkaFuture<Config>> configs = admin.describeConfigs(resources).values();
        ArrayNode results = JSON.createArrayNode();
        for (String name : names) {
            ObjectNode result = outcome(name, topics.get(name));
            if (result.get("ok").asBoolean()) {
                try {
                    TopicDescription description = topics.get(name).get();
                    result.put("topic_id", description.topicId().toString());
                    ObjectNode partitions = result.putObject("partitions");
                    for (TopicPartitionInfo p : description.partitions()) {
                        ArrayNode replicas = partitions.putArray(Integer.toString(p.partition()));
                        p.replicas().forEach(node -> replicas.add(node.id()));
                    }
                    ObjectNode values = result.putObject("configs");
                    for (ConfigEntry entry : configs.get(new ConfigResource(ConfigResource.Type.TOPIC, name)).get().entries()) {
                        ObjectNode value = values.putObject(entry.name());
                        value.put("value", entry.value());
                        value.put("source", entry.source().name());
                    }
                } catch (ExecutionException e) {
                    result = failure(name, e.getCause());
                }
            }
            results.add(result);
        }
        return results;
    }

    static JsonNode topicId(String name) throws Exception {
        KafkaFuture<TopicDescription> future = admin.describeTopics(List.of(name)).topicNameValues().get(name);
        ObjectNode result = outcome(name, future);
        if (result.get("ok").asBoolean()) {
            result.put("topic_id", future.get().topicId().toString());
        }
        return JSON.createArrayNode().add(result);
    }

    // Partition-level results folded into one per topic, in request order: a topic fails with
    // the first of its partitions that failed.
    static <T> JsonNode perTopic(Map<TopicPartition, KafkaFuture<T>> futures) throws InterruptedException {
        Map<String, ObjectNode> byTopic = new LinkedHashMap<>();
        for (Map.Entry<TopicPartition, KafkaFuture<T>> entry : futures.entrySet()) {
            String topic = entry.getKey().topic();
            ObjectNode result = outcome(topic, entry.getValue());
            ObjectNode seen = byTopic.get(topic);
            if (seen == null || (seen.get("ok").asBoolean() && !result.get("ok").asBoolean())) {
                byTopic.put(topic, result);
            }
        }
        ArrayNode results = JSON.createArrayNode();
        byTopic.values().forEach(results::add);
        return results;
    }

    static ObjectNode outcome(String topic, KafkaFuture<?> future) throws InterruptedException {
        if (future == null) {
            return failure(topic, new IllegalStateException("the client returned no result for this topic"));
        }
        try {
            future.get();
        } catch (ExecutionException e) {
            return failure(topic, e.getCause());
        }
        ObjectNode result = JSON.createObjectNode();
        result.put("topic", topic);
        result.put("ok", true);
        return result;
    }

    static ObjectNode failure(String topic, Throwable error) {
        ObjectNode result = JSON.createObjectNode();
        result.put("topic", topic);
        result.put("ok", false);
        result.put("error", error.getClass().getSimpleName());
        // Kafka's own exception -> error-code mapping; it calls every unknown exception
        // UNKNOWN_SERVER_ERROR, which would hide client-side failures.
        Errors code = Errors.forException(error);
        if (code != Errors.UNKNOWN_SERVER_ERROR || error instanceof UnknownServerException) {
            result.put("kafka_error", code.name());
        }
        result.put("message", error.getMessage());
        return result;
    }

    static List<Integer> ints(JsonNode array) {
        List<Integer> values = new ArrayList<>();
        for (Iterator<JsonNode> it = array.elements(); it.hasNext(); ) {
            values.add(it.next().asInt());
        }
        return values;
    }
}

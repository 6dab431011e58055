package com.example.policy;

import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.policy.AlterConfigPolicy;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/**
 * A broker-side topic policy, as teams write them: set it as the brokers'
 * create.topic.policy.class.name and alter.config.policy.class.name, or load the same jar
 * in kafka-policy-proxy with a java_policy rule.
 *
 * Creates: the name is "team.dataset" in lower case, partitions and replication factor stay
 * within bounds (with an explicit assignment too), retention.ms is set and bounded.
 * Config changes (topics only): retention.ms stays bounded and is never removed, and
 * cleanup.policy may not become compact-only.
 *
 * configure() reads policy.max.partitions, policy.min.replication.factor and
 * policy.max.retention.ms (defaults 12, 2 and 604800000).
 */
public class ReferencePolicy implements CreateTopicPolicy, AlterConfigPolicy {
    private static final Pattern NAME = Pattern.compile("[a-z0-9]+\\.[a-z0-9][a-z0-9-]*");

    private int maxPartitions = 12;
    private int minReplicationFactor = 2;
    private long maxRetentionMs = 604_800_000L;

    @Override
    public void configure(Map<String, ?> configs) {
        maxPartitions = intSetting(configs, "policy.max.partitions", maxPartitions);
        minReplicationFactor = intSetting(configs, "policy.min.replication.factor", minReplicationFactor);
        Object retention = configs.get("policy.max.retention.ms");
        if (retention != null) {
            maxRetentionMs = Long.parseLong(retention.toString());
        }
    }

    private static int intSetting(Map<String, ?> configs, String key, int fallback) {
        Object value = configs.get(key);
        return value == null ? fallback : Integer.parseInt(value.toString());
    }

    @Override
    public void validate(CreateTopicPolicy.RequestMetadata request) throws PolicyViolationException {
        String topic = request.topic();
        if (!NAME.matcher(topic).matches()) {
            throw new PolicyViolationException("Topic name " + topic + " must look like team.dataset (lower case).");
        }
        int partitions;
        int replicationFactor;
        Map<Integer, List<Integer>> assignments = request.replicasAssignments();
        if (assignments != null) {
            partitions = assignments.size();
            replicationFactor = Integer.MAX_VALUE;
            for (List<Integer> replicas : assignments.values()) {
                replicationFactor = Math.min(replicationFactor, replicas.size());
            }
        } else {
            partitions = request.numPartitions();
            replicationFactor = request.replicationFactor();
        }
        if (partitions > maxPartitions) {
            throw new PolicyViolationException("Topic " + topic + " asks for " + partitions
                + " partitions; at most " + maxPartitions + " are allowed.");
        }
        if (replicationFactor < minReplicationFactor) {
            throw new PolicyViolationException("Topic " + topic + " has replication factor "
                + replicationFactor + "; at least " + minReplicationFactor + " is required.");
        }
        String retention = request.configs().get("retention.ms");
        if (retention == null) {
            throw new PolicyViolationException("Topic " + topic + " must set retention.ms.");
        }
        checkRetention(topic, retention);
    }

    @Override
    public void validate(AlterConfigPolicy.RequestMetadata request) throws PolicyViolationException {
        ConfigResource resource = request.resource();
        if (resource.type() != ConfigResource.Type.TOPIC) {
            return;
        }
        String topic = resource.name();
        Map<String, String> configs = request.configs();
        if (configs.containsKey("retention.ms")) {
            String retention = configs.get("retention.ms");
            if (retention == null) {
                throw new PolicyViolationException("retention.ms of " + topic + " may not be removed.");
            }
            checkRetention(topic, retention);
        }
        if ("compact".equals(configs.get("cleanup.policy"))) {
            throw new PolicyViolationException("Topic " + topic + " may not become compact-only; use compact,delete.");
        }
    }

    private void checkRetention(String topic, String retention) {
        long value;
        try {
            value = Long.parseLong(retention);
        } catch (NumberFormatException e) {
            throw new PolicyViolationException("retention.ms of " + topic + " is not a number: " + retention);
        }
        if (value < 0 || value > maxRetentionMs) {
            throw new PolicyViolationException("retention.ms of " + topic + " is " + value
                + "; it must be between 0 and " + maxRetentionMs + ".");
        }
    }

    @Override
    public void close() {
    }
}

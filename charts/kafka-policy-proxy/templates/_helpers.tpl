{{/* Names and labels. */}}
{{- define "kpp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kpp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kpp.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kpp.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kpp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kpp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kpp.labels" -}}
{{ include "kpp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kpp.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Where each file is mounted in the proxy container. */}}
{{- define "kpp.dir" -}}/etc/kafka-policy-proxy/{{ . }}{{- end -}}

{{- define "kpp.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default (printf "%s-policy" (include "kpp.fullname" .)) -}}
{{- end -}}

{{- define "kpp.advertisedHost" -}}
{{- if .Values.listeners.advertisedHost -}}
{{- .Values.listeners.advertisedHost -}}
{{- else if eq .Values.mode "sidecar" -}}
127.0.0.1
{{- else -}}
{{- printf "%s.%s.svc" (include "kpp.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The listener ports: bootstrap, then one per broker id. */}}
{{- define "kpp.listenerPorts" -}}
- {name: bootstrap, containerPort: {{ .Values.listeners.bootstrapPort }}}
{{- range .Values.listeners.brokerIds }}
- {name: broker-{{ . }}, containerPort: {{ add $.Values.listeners.brokerPortBase . }}}
{{- end }}
{{- with .Values.listeners.sni.bootstrapAddress }}
- {name: sni, containerPort: {{ regexFind "[0-9]+$" . }}}
{{- end }}
{{- end -}}

{{/* proxy.yaml: the chart's settings, then .Values.config merged over them. */}}
{{- define "kpp.config" -}}
{{- $v := .Values -}}
{{- $sidecar := eq $v.mode "sidecar" -}}
{{- $listeners := dict "bind_host" (ternary "127.0.0.1" "0.0.0.0" $sidecar) "advertised_host" (include "kpp.advertisedHost" .) "bootstrap_port" $v.listeners.bootstrapPort "broker_port_base" $v.listeners.brokerPortBase -}}
{{- with $v.listeners.tls.secretName -}}
{{- $dir := include "kpp.dir" "listener-tls" -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "client_auth" $v.listeners.tls.clientAuth "principal_mapping_rules" $v.listeners.tls.principalMappingRules -}}
{{- if ne $v.listeners.tls.clientAuth "none" -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- $_ := set $listeners "tls" $tls -}}
{{- end -}}
{{- with $v.listeners.sni.bootstrapAddress -}}
{{- if not $v.listeners.tls.secretName -}}
{{- fail "listeners.sni needs listeners.tls.secretName (a certificate covering the bootstrap and broker names)" -}}
{{- end -}}
{{- $_ := set $listeners "sni" (dict "bootstrap_address" . "advertised_broker_address_pattern" $v.listeners.sni.advertisedBrokerAddressPattern) -}}
{{- end -}}
{{- $upstream := dict "bootstrap_servers" $v.upstream.bootstrapServers -}}
{{- if $v.upstream.tls.enabled -}}
{{- $tls := dict "check_hostname" $v.upstream.tls.checkHostname -}}
{{- if $v.upstream.tls.secretName -}}
{{- $dir := include "kpp.dir" "upstream-tls" -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" $dir) -}}
{{- if $v.upstream.tls.clientCertificate -}}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" $dir) -}}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" $dir) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $upstream "tls" $tls -}}
{{- end -}}
{{- with $v.kafkaClientProperties.existingSecret -}}
{{- if or $v.upstream.tls.enabled $v.clusterState.sasl.mechanism -}}
{{- fail "kafkaClientProperties replaces upstream.tls and clusterState.sasl: describe TLS and SASL in the properties file" -}}
{{- end -}}
{{- $_ := set $upstream "client_properties" (printf "%s/%s" (include "kpp.dir" "client") $v.kafkaClientProperties.key) -}}
{{- end -}}
{{- $config := dict "listeners" $listeners "upstream" $upstream -}}
{{- with $v.clusterState.sasl -}}
{{- if .mechanism -}}
{{- $sasl := dict "mechanism" .mechanism "username" .username "password_file" (printf "%s/%s" (include "kpp.dir" "sasl") .passwordKey) -}}
{{- $_ := set $config "cluster_state" (dict "sasl" $sasl) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $config "policy" (dict "file" (printf "%s/%s" (include "kpp.dir" "policy") $v.policy.key) "watch" $v.policy.watch) -}}
{{- $_ := set $config "admin" (dict "bind_host" "0.0.0.0" "port" $v.admin.port) -}}
{{- $audit := dict "stdout" $v.audit.stdout "on_failure" $v.audit.onFailure -}}
{{- if $v.audit.kafka.enabled -}}
{{- $_ := set $audit "kafka" (dict "topic" $v.audit.kafka.topic) -}}
{{- end -}}
{{- $_ := set $config "audit" $audit -}}
{{- $_ := set $config "logging" (dict "level" $v.logging.level "format" $v.logging.format) -}}
{{- $_ := set $config "workers" (ternary 1 $v.workers $sidecar) -}}
{{- $_ := set $config "shutdown_timeout_s" $v.shutdownTimeoutSeconds -}}
{{- toYaml (mustMergeOverwrite $config (deepCopy $v.config)) -}}
{{- end -}}

{{/* The proxy container (shared mode: a container; sidecar mode: a native sidecar). */}}
{{- define "kpp.container" -}}
{{- $v := .Values -}}
{{- if gt (add $v.preStopSleepSeconds $v.shutdownTimeoutSeconds) (int $v.terminationGracePeriodSeconds) -}}
{{- fail "terminationGracePeriodSeconds must be at least preStopSleepSeconds + shutdownTimeoutSeconds, or the kubelet kills the proxy while it drains" -}}
{{- end -}}
- name: kafka-policy-proxy
  image: {{ include "kpp.image" . }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if eq $v.mode "sidecar" }}
  restartPolicy: Always
  {{- end }}
  # The image's ENTRYPOINT is `kafka-policy-proxy`; these replace its CMD.
  args: ["run", "--config", "{{ include "kpp.dir" "config" }}/proxy.yaml"]
  env:
    - name: KPP_AUDIT__PROXY_ID
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    {{- if ne $v.mode "sidecar" }}
    {{- include "kpp.listenerPorts" . | nindent 4 }}
    {{- end }}
    - {name: admin, containerPort: {{ $v.admin.port }}}
  startupProbe:
    httpGet: {path: /readyz, port: admin}
    periodSeconds: 2
    failureThreshold: 30
  readinessProbe:
    httpGet: {path: /readyz, port: admin}
    periodSeconds: 5
    failureThreshold: 2
  livenessProbe:
    httpGet: {path: /healthz, port: admin}
    periodSeconds: 10
    failureThreshold: 3
  lifecycle:
    # The endpoints controller takes the pod out of the Service before the drain starts.
    preStop:
      sleep: {seconds: {{ $v.preStopSleepSeconds }}}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - {name: kpp-config, mountPath: {{ include "kpp.dir" "config" }}, readOnly: true}
    - {name: kpp-policy, mountPath: {{ include "kpp.dir" "policy" }}, readOnly: true}
    {{- if $v.listeners.tls.secretName }}
    - {name: kpp-listener-tls, mountPath: {{ include "kpp.dir" "listener-tls" }}, readOnly: true}
    {{- end }}
    {{- if and $v.upstream.tls.enabled $v.upstream.tls.secretName }}
    - {name: kpp-upstream-tls, mountPath: {{ include "kpp.dir" "upstream-tls" }}, readOnly: true}
    {{- end }}
    {{- if $v.clusterState.sasl.mechanism }}
    - {name: kpp-sasl, mountPath: {{ include "kpp.dir" "sasl" }}, readOnly: true}
    {{- end }}
    {{- if $v.kafkaClientProperties.existingSecret }}
    - {name: kpp-client, mountPath: {{ include "kpp.dir" "client" }}, readOnly: true}
    {{- end }}
    - {name: kpp-tmp, mountPath: /tmp}
{{- end -}}

{{- define "kpp.volumes" -}}
{{- $v := .Values -}}
- name: kpp-config
  configMap: {name: {{ include "kpp.fullname" . }}-config}
- name: kpp-policy
  configMap: {name: {{ include "kpp.policyConfigMap" . }}}
{{- with $v.listeners.tls.secretName }}
- name: kpp-listener-tls
  secret: {secretName: {{ . }}}
{{- end }}
{{- if and $v.upstream.tls.enabled $v.upstream.tls.secretName }}
- name: kpp-upstream-tls
  secret: {secretName: {{ $v.upstream.tls.secretName }}}
{{- end }}
{{- if $v.clusterState.sasl.mechanism }}
- name: kpp-sasl
  secret: {secretName: {{ required "clusterState.sasl.secretName is required with a mechanism" $v.clusterState.sasl.secretName }}}
{{- end }}
{{- with $v.kafkaClientProperties.existingSecret }}
- name: kpp-client
  secret: {secretName: {{ . }}}
{{- end }}
- name: kpp-tmp
  emptyDir: {}
{{- end -}}

{{- define "kpp.podMetadata" -}}
labels:
  {{- include "kpp.selectorLabels" . | nindent 2 }}
  {{- with .Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  # A new config rolls the pods (the policy reloads in place instead).
  checksum/config: {{ include "kpp.config" . | sha256sum }}
  {{- if .Values.metrics.annotations }}
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .Values.admin.port | quote }}
  prometheus.io/path: /metrics
  {{- end }}
  {{- with .Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "kpp.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

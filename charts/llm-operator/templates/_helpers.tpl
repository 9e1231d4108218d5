{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "llm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or the release name when it already contains the chart name. */}}
{{- define "llm-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "llm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (never add the version here). */}}
{{- define "llm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "llm-operator.labels" -}}
helm.sh/chart: {{ include "llm-operator.chart" . }}
{{ include "llm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llm-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* metadata.annotations block at indent 2, with its own leading newline (empty when none). */}}
{{- define "llm-operator.annotations" -}}
{{- with .Values.commonAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{- define "llm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llm-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image reference: registry/repository@digest or :tag (appVersion by default). */}}
{{- define "llm-operator.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The namespaces the operator watches, as a JSON list: watchNamespaces, else the release's
namespace; [] (the whole cluster) only with clusterWide=true.
*/}}
{{- define "llm-operator.watchedNamespaces" -}}
{{- if .Values.clusterWide -}}
[]
{{- else if .Values.watchNamespaces -}}
{{- .Values.watchNamespaces | toJson -}}
{{- else -}}
{{- list .Release.Namespace | toJson -}}
{{- end -}}
{{- end -}}

{{/* The operator's ServiceAccount as the API server names the user. */}}
{{- define "llm-operator.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "llm-operator.serviceAccountName" .) -}}
{{- end -}}

{{/* Cross-value checks the JSON schema cannot express; each names the values and the fix. */}}
{{- define "llm-operator.validate" -}}
{{- $presets := list "nvidia" "gke" "eks" "aks" -}}
{{- if not (or (has .Values.settings.gpuClass $presets) (hasKey .Values.settings.gpuClasses .Values.settings.gpuClass)) -}}
{{- fail (printf "settings.gpuClass=%s is neither a preset (%s) nor a key of settings.gpuClasses (%s); fix: set settings.gpuClass to one of them, or define %s under settings.gpuClasses" .Values.settings.gpuClass (join ", " $presets) (join ", " (keys .Values.settings.gpuClasses | sortAlpha)) .Values.settings.gpuClass) -}}
{{- end -}}
{{- if and .Values.clusterWide .Values.watchNamespaces -}}
{{- fail (printf "clusterWide=true and watchNamespaces=%s contradict each other: cluster-wide the operator watches every namespace; fix: drop watchNamespaces, or set clusterWide=false to watch only those" (toJson .Values.watchNamespaces)) -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.peering.enabled) -}}
{{- fail (printf "replicaCount=%d needs peering.enabled=true: without kopf peering several operator pods would handle the same LLMServices at once; fix: set peering.enabled=true or replicaCount=1" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.metrics.enabled .Values.health.livenessProbe.enabled (eq (int .Values.metrics.port) (int .Values.health.port)) -}}
{{- fail (printf "metrics.port and health.port are both %d: the metrics server and kopf's health endpoint cannot share a port; fix: give health.port another value" (int .Values.health.port)) -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs metrics.enabled=true (there is no metrics Service to scrape); fix: set metrics.enabled=true or metrics.serviceMonitor.enabled=false" -}}
{{- end -}}
{{- end -}}

{{/*
The PriorityClass of tuning Jobs on spare GPUs: tuningPriorityClass.name, else <fullname>-tuning.
Its value (tuningPriorityValue): tuningPriorityClass.value, else autoscalerCutoff - 1 (the
cluster autoscaler never scales up for a pod below its cutoff), or the cutoff itself with
allowScaleUp; a value that contradicts allowScaleUp is refused, naming both values.
*/}}
{{- define "llm-operator.tuningPriorityValue" -}}
{{- $pc := .Values.tuningPriorityClass -}}
{{- $cutoff := int $pc.autoscalerCutoff -}}
{{- if kindIs "invalid" $pc.value -}}
{{- if $pc.allowScaleUp -}}
{{- if ge $cutoff 0 -}}
{{- fail (printf "tuningPriorityClass.allowScaleUp=true needs a negative tuningPriorityClass.autoscalerCutoff (got %d): the tuning class must stay below serving pods (0), and with a cutoff of %d every priority below 0 is expendable, so no such class triggers a scale-up; fix: set autoscalerCutoff to your cluster autoscaler's --expendable-pods-priority-cutoff, or allowScaleUp=false" $cutoff $cutoff) -}}
{{- end -}}
{{- $cutoff -}}
{{- else -}}
{{- sub $cutoff 1 -}}
{{- end -}}
{{- else -}}
{{- $value := int $pc.value -}}
{{- if and (not $pc.allowScaleUp) (ge $value $cutoff) -}}
{{- fail (printf "tuningPriorityClass.value=%d is not below the cluster autoscaler's expendable cutoff (tuningPriorityClass.autoscalerCutoff=%d): a tuning pod that finds no spare GPU would make the autoscaler add GPU nodes for it; fix: set tuningPriorityClass.value below %d (or leave it empty), or set tuningPriorityClass.allowScaleUp=true to allow those scale-ups" $value $cutoff $cutoff) -}}
{{- end -}}
{{- if and $pc.allowScaleUp (lt $value $cutoff) -}}
{{- fail (printf "tuningPriorityClass.allowScaleUp=true but tuningPriorityClass.value=%d is below the cluster autoscaler's expendable cutoff (tuningPriorityClass.autoscalerCutoff=%d), so the autoscaler never adds a node for it; fix: set the value to %d or above (below 0), leave it empty, or set allowScaleUp=false" $value $cutoff $cutoff) -}}
{{- end -}}
{{- $value -}}
{{- end -}}
{{- end -}}

{{- define "llm-operator.tuningPriorityClass" -}}
{{- default (printf "%s-tuning" (include "llm-operator.fullname" .)) .Values.tuningPriorityClass.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The chart's name. */}}
{{- define "outbox-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, used for every object. */}}
{{- define "outbox-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "outbox-exporter.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "outbox-exporter.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the pods. */}}
{{- define "outbox-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "outbox-exporter.labels" -}}
{{ include "outbox-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The config file's text. */}}
{{- define "outbox-exporter.config" -}}
{{- .Values.config -}}
{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "outbox-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "outbox-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

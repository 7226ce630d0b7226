{{- define "egressd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "egressd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "egressd.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "egressd.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "egressd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "egressd.name" . }}
{{- end }}

{{- define "egressd.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "egressd.name" . }}-controller
{{- end }}

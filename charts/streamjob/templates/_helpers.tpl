{{- define "streamjob.name" -}}streamjob-operator{{- end -}}
{{- define "streamjob.labels" -}}
app.kubernetes.io/name: {{ include "streamjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "streamjob.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{/* The rules the operator needs, wherever it acts. */}}
{{- define "streamjob.operatorRules" -}}
- apiGroups: [streamjob.io]
  resources: [streamjobs]
  verbs: [get, list, watch, patch, update]
- apiGroups: [streamjob.io]
  resources: [streamjobs/status]
  verbs: [get, patch, update]
# what drivers get (operator/k8s/resources.py DRIVER_ROLE_*): RBAC lets the
# operator grant only what it holds itself
- apiGroups: [""]
  resources: [pods, services, configmaps, persistentvolumeclaims]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [secrets, serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch, create]
{{- end -}}
{{- define "streamjob.driverRules" -}}
- apiGroups: [""]
  resources: [pods, services, configmaps, persistentvolumeclaims]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
{{- end -}}

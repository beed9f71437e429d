"""ValidatingAdmissionPolicy (upstream's k8s.io/apiserver/pkg/admission/plugin/policy/validating): the
ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding kinds (kinds/validatingadmissionpolicy.py, as every kind; validation.py here), the
policies and bindings in memory (source.py), the evaluation of one policy through one binding against a
request, with CEL (evaluate.py), and the admission plugin (plugin.py) that turns decisions into a
refusal, warnings or nothing, per the binding's validationActions."""

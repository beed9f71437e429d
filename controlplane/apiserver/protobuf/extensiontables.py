"""Messages of the two built-in kinds that live outside k8s.io/api: apiextensions.k8s.io/v1
CustomResourceDefinition and apiregistration.k8s.io/v1 APIService (and their lists).

Upstream's serialization fixtures hold neither kind, so `derive` cannot find them; the field numbers
here are those of upstream's generated.proto for the two groups (apiextensions-apiserver's and
kube-aggregator's v1), written down as a table of the same shape as `tables.MESSAGES`. Names carry
the group's prefix where k8s.io/api has a message of the same name with other fields.

Four types of JSONSchemaProps are not plain messages and have a codec type of their own: `json`
(JSON {raw = 1}, raw JSON text; an unset value is an empty message), `schemaorarray`
(JSONSchemaPropsOrArray: a schema or a list of schemas), `schemaorbool` (JSONSchemaPropsOrBool: a
schema, or true/false) and `schemaorstrings` (JSONSchemaPropsOrStringArray); `double` is a float64
on the wire as a fixed 64-bit field.
"""

from __future__ import annotations

SCHEMA = "ApiextensionsV1JSONSchemaProps"

MESSAGES: dict[str, tuple[tuple[int, str, str, str], ...]] = {
    # apiextensions.k8s.io/v1
    "ApiextensionsV1CustomResourceDefinition": (
        (1, "metadata", "ObjectMeta", ""),
        (2, "spec", "ApiextensionsV1CustomResourceDefinitionSpec", ""),
        (3, "status", "ApiextensionsV1CustomResourceDefinitionStatus", ""),
    ),
    "ApiextensionsV1CustomResourceDefinitionSpec": (
        (1, "group", "string", ""),
        (3, "names", "ApiextensionsV1CustomResourceDefinitionNames", ""),
        (4, "scope", "string", ""),
        (7, "versions", "ApiextensionsV1CustomResourceDefinitionVersion", "repeated"),
        (9, "conversion", "ApiextensionsV1CustomResourceConversion", ""),
        (10, "preserveUnknownFields", "bool", ""),
    ),
    "ApiextensionsV1CustomResourceDefinitionNames": (
        (1, "plural", "string", ""),
        (2, "singular", "string", ""),
        (3, "shortNames", "string", "repeated"),
        (4, "kind", "string", ""),
        (5, "listKind", "string", ""),
        (6, "categories", "string", "repeated"),
    ),
    "ApiextensionsV1CustomResourceDefinitionVersion": (
        (1, "name", "string", ""),
        (2, "served", "bool", ""),
        (3, "storage", "bool", ""),
        (4, "schema", "ApiextensionsV1CustomResourceValidation", ""),
        (5, "subresources", "ApiextensionsV1CustomResourceSubresources", ""),
        (6, "additionalPrinterColumns", "ApiextensionsV1CustomResourceColumnDefinition", "repeated"),
        (7, "deprecated", "bool", ""),
        (8, "deprecationWarning", "string", ""),
        (9, "selectableFields", "ApiextensionsV1SelectableField", "repeated"),
    ),
    "ApiextensionsV1SelectableField": ((1, "jsonPath", "string", ""),),
    "ApiextensionsV1CustomResourceValidation": ((1, "openAPIV3Schema", SCHEMA, ""),),
    "ApiextensionsV1CustomResourceSubresources": (
        (1, "status", "ApiextensionsV1CustomResourceSubresourceStatus", ""),
        (2, "scale", "ApiextensionsV1CustomResourceSubresourceScale", ""),
    ),
    "ApiextensionsV1CustomResourceSubresourceStatus": (),
    "ApiextensionsV1CustomResourceSubresourceScale": (
        (1, "specReplicasPath", "string", ""),
        (2, "statusReplicasPath", "string", ""),
        (3, "labelSelectorPath", "string", ""),
    ),
    "ApiextensionsV1CustomResourceColumnDefinition": (
        (1, "name", "string", ""),
        (2, "type", "string", ""),
        (3, "format", "string", ""),
        (4, "description", "string", ""),
        (5, "priority", "int", ""),
        (6, "jsonPath", "string", ""),
    ),
    "ApiextensionsV1CustomResourceConversion": (
        (1, "strategy", "string", ""),
        (2, "webhook", "ApiextensionsV1WebhookConversion", ""),
    ),
    "ApiextensionsV1WebhookConversion": (
        (2, "clientConfig", "ApiextensionsV1WebhookClientConfig", ""),
        (3, "conversionReviewVersions", "string", "repeated"),
    ),
    "ApiextensionsV1WebhookClientConfig": (
        (1, "service", "ApiextensionsV1ServiceReference", ""),
        (2, "caBundle", "bytes", ""),
        (3, "url", "string", ""),
    ),
    "ApiextensionsV1ServiceReference": (
        (1, "namespace", "string", ""),
        (2, "name", "string", ""),
        (3, "path", "string", ""),
        (4, "port", "int", ""),
    ),
    "ApiextensionsV1CustomResourceDefinitionStatus": (
        (1, "conditions", "ApiextensionsV1CustomResourceDefinitionCondition", "repeated"),
        (2, "acceptedNames", "ApiextensionsV1CustomResourceDefinitionNames", ""),
        (3, "storedVersions", "string", "repeated"),
    ),
    "ApiextensionsV1CustomResourceDefinitionCondition": (
        (1, "type", "string", ""),
        (2, "status", "string", ""),
        (3, "lastTransitionTime", "time", ""),
        (4, "reason", "string", ""),
        (5, "message", "string", ""),
    ),
    SCHEMA: (
        (1, "id", "string", ""),
        (2, "$schema", "string", ""),
        (3, "$ref", "string", ""),
        (4, "description", "string", ""),
        (5, "type", "string", ""),
        (6, "format", "string", ""),
        (7, "title", "string", ""),
        (8, "default", "json", ""),
        (9, "maximum", "double", ""),
        (10, "exclusiveMaximum", "bool", ""),
        (11, "minimum", "double", ""),
        (12, "exclusiveMinimum", "bool", ""),
        (13, "maxLength", "int", ""),
        (14, "minLength", "int", ""),
        (15, "pattern", "string", ""),
        (16, "maxItems", "int", ""),
        (17, "minItems", "int", ""),
        (18, "uniqueItems", "bool", ""),
        (19, "multipleOf", "double", ""),
        (20, "enum", "json", "repeated"),
        (21, "maxProperties", "int", ""),
        (22, "minProperties", "int", ""),
        (23, "required", "string", "repeated"),
        (24, "items", "schemaorarray", ""),
        (25, "allOf", SCHEMA, "repeated"),
        (26, "oneOf", SCHEMA, "repeated"),
        (27, "anyOf", SCHEMA, "repeated"),
        (28, "not", SCHEMA, ""),
        (29, "properties", SCHEMA, "map"),
        (30, "additionalProperties", "schemaorbool", ""),
        (31, "patternProperties", SCHEMA, "map"),
        (32, "dependencies", "schemaorstrings", "map"),
        (33, "additionalItems", "schemaorbool", ""),
        (34, "definitions", SCHEMA, "map"),
        (35, "externalDocs", "ApiextensionsV1ExternalDocumentation", ""),
        (36, "example", "json", ""),
        (37, "nullable", "bool", ""),
        (38, "x-kubernetes-preserve-unknown-fields", "bool", ""),
        (39, "x-kubernetes-embedded-resource", "bool", ""),
        (40, "x-kubernetes-int-or-string", "bool", ""),
        (41, "x-kubernetes-list-map-keys", "string", "repeated"),
        (42, "x-kubernetes-list-type", "string", ""),
        (43, "x-kubernetes-map-type", "string", ""),
        (44, "x-kubernetes-validations", "ApiextensionsV1ValidationRule", "repeated"),
    ),
    "ApiextensionsV1ExternalDocumentation": (
        (1, "description", "string", ""),
        (2, "url", "string", ""),
    ),
    "ApiextensionsV1ValidationRule": (
        (1, "rule", "string", ""),
        (2, "message", "string", ""),
        (3, "messageExpression", "string", ""),
        (4, "reason", "string", ""),
        (5, "fieldPath", "string", ""),
        (6, "optionalOldSelf", "bool", ""),
    ),
    # apiregistration.k8s.io/v1
    "ApiregistrationV1APIService": (
        (1, "metadata", "ObjectMeta", ""),
        (2, "spec", "ApiregistrationV1APIServiceSpec", ""),
        (3, "status", "ApiregistrationV1APIServiceStatus", ""),
    ),
    "ApiregistrationV1APIServiceSpec": (
        (1, "service", "ApiregistrationV1ServiceReference", ""),
        (2, "group", "string", ""),
        (3, "version", "string", ""),
        (4, "insecureSkipTLSVerify", "bool", ""),
        (5, "caBundle", "bytes", ""),
        (7, "groupPriorityMinimum", "int", ""),
        (8, "versionPriority", "int", ""),
    ),
    "ApiregistrationV1ServiceReference": (
        (1, "namespace", "string", ""),
        (2, "name", "string", ""),
        (3, "port", "int", ""),
    ),
    "ApiregistrationV1APIServiceStatus": (
        (1, "conditions", "ApiregistrationV1APIServiceCondition", "repeated"),
    ),
    "ApiregistrationV1APIServiceCondition": (
        (1, "type", "string", ""),
        (2, "status", "string", ""),
        (3, "lastTransitionTime", "time", ""),
        (4, "reason", "string", ""),
        (5, "message", "string", ""),
    ),
}

ROOTS: dict[tuple[str, str], str] = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "ApiextensionsV1CustomResourceDefinition",
    ("apiregistration.k8s.io/v1", "APIService"): "ApiregistrationV1APIService",
}

# The non-pointer `omitempty` numbers and bools of these types: Go writes them on the wire even when
# zero, and its JSON leaves the zeros out.
OMIT_ZERO: dict[str, frozenset[str]] = {
    "ApiextensionsV1CustomResourceDefinitionSpec": frozenset({"preserveUnknownFields"}),
    "ApiextensionsV1CustomResourceDefinitionVersion": frozenset({"deprecated"}),
    "ApiextensionsV1CustomResourceColumnDefinition": frozenset({"priority"}),
    SCHEMA: frozenset(
        {
            "exclusiveMaximum",
            "exclusiveMinimum",
            "uniqueItems",
            "nullable",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-int-or-string",
        }
    ),
    "ApiregistrationV1APIServiceSpec": frozenset({"insecureSkipTLSVerify"}),
}

// `@sinclair/typebox` as the bridge provides it: the builders a tool definition uses, making
// plain JSON Schema (the manifest's schemas are the ones Polpo checks against).
const optional = Symbol("optional");
const object = (properties = {}, options = {}) => ({
  type: "object",
  properties,
  required: Object.keys(properties).filter((k) => !properties[k][optional]),
  ...options,
});
export const Type = {
  Object: object,
  String: (o = {}) => ({ type: "string", ...o }),
  Number: (o = {}) => ({ type: "number", ...o }),
  Integer: (o = {}) => ({ type: "integer", ...o }),
  Boolean: (o = {}) => ({ type: "boolean", ...o }),
  Null: (o = {}) => ({ type: "null", ...o }),
  Any: (o = {}) => ({ ...o }),
  Unknown: (o = {}) => ({ ...o }),
  Array: (items, o = {}) => ({ type: "array", items, ...o }),
  Literal: (value, o = {}) => ({ const: value, ...o }),
  Union: (anyOf, o = {}) => ({ anyOf, ...o }),
  Record: (_key, value, o = {}) => ({ type: "object", additionalProperties: value, ...o }),
  Optional: (schema) => ({ ...schema, [optional]: true }),
};

// `@polpo-ai/tools` as the bridge provides it: defineTool returns its definition.
export const defineTool = (definition) => definition;

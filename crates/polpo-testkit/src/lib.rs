//! Test support: scripted fake LLM servers that speak the real OpenAI and Anthropic wire
//! formats over real HTTP. The only way a Polpo test replaces a model.

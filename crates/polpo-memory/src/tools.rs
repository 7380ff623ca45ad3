//! The `memory_item_*` tools, and the [`MemoryToolSource`] that offers them to an agent only
//! when its `allowedTools` names them (exactly or by a prefix pattern such as
//! `memory_item_*`; a bare `*` grants none): having a memory store gives no agent a tool.
//!
//! What a tool may reach comes from the trusted context, never from the model: the project
//! scope, the calling agent's own scope, and the scopes of the invoking user and session when
//! the invocation has them. The model only picks one of those by name.

use std::sync::Arc;

use polpo_core::config::project::Agent;
use polpo_core::policy::pattern_matches;
use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_store::{MemoryFilter, MemoryItem, MemoryItemPatch, MemoryScope, NewMemoryItem, PageRequest, ScopeKind};
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput, ToolSource};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Memory, MemoryError, SearchRequest};

/// Search items (lexical + semantic).
pub const MEMORY_ITEM_SEARCH: &str = "memory_item_search";
/// Create an item.
pub const MEMORY_ITEM_CREATE: &str = "memory_item_create";
/// Change an item.
pub const MEMORY_ITEM_UPDATE: &str = "memory_item_update";
/// Delete an item.
pub const MEMORY_ITEM_DELETE: &str = "memory_item_delete";
/// List items, newest first.
pub const MEMORY_ITEM_LIST: &str = "memory_item_list";
/// Every typed memory tool.
pub const MEMORY_ITEM_TOOLS: [&str; 5] =
    [MEMORY_ITEM_SEARCH, MEMORY_ITEM_CREATE, MEMORY_ITEM_UPDATE, MEMORY_ITEM_DELETE, MEMORY_ITEM_LIST];

/// Most items `memory_item_list` returns at once.
const MAX_LIST: u32 = 50;

#[derive(Debug, Clone, Copy)]
enum Action {
    Search,
    Create,
    Update,
    Delete,
    List,
}

/// The five tools over `memory`.
pub fn memory_item_tools(memory: &Memory) -> Vec<Arc<dyn Tool>> {
    [Action::Search, Action::Create, Action::Update, Action::Delete, Action::List]
        .into_iter()
        .map(|action| Arc::new(MemoryItemTool { spec: spec(action), action, memory: memory.clone() }) as Arc<dyn Tool>)
        .collect()
}

/// Offers the memory tools an agent's `allowedTools` grants, after the tools of an optional
/// inner source (the agent's MCP servers), so one runtime seam carries both.
pub struct MemoryToolSource {
    tools: Vec<Arc<dyn Tool>>,
    inner: Option<Arc<dyn ToolSource>>,
}

impl MemoryToolSource {
    /// The source of `memory`'s tools.
    pub fn new(memory: &Memory) -> Self {
        MemoryToolSource { tools: memory_item_tools(memory), inner: None }
    }

    /// Offer `inner`'s tools too, before the memory tools.
    pub fn chained(mut self, inner: Arc<dyn ToolSource>) -> Self {
        self.inner = Some(inner);
        self
    }
}

/// True when `allowed` (an agent's `allowedTools`) names `tool` explicitly: a bare `*` does not.
pub fn granted(allowed: Option<&[String]>, tool: &str) -> bool {
    allowed.is_some_and(|patterns| patterns.iter().any(|p| p.trim() != "*" && pattern_matches(p, tool)))
}

#[async_trait::async_trait]
impl ToolSource for MemoryToolSource {
    async fn tools_for(&self, agent: &Agent, ctx: &ToolContext) -> Vec<Arc<dyn Tool>> {
        let mut tools = match &self.inner {
            Some(inner) => inner.tools_for(agent, ctx).await,
            None => Vec::new(),
        };
        let allowed = agent.config.allowed_tools.as_deref();
        tools.extend(self.tools.iter().filter(|t| granted(allowed, &t.spec().name)).cloned());
        tools
    }
}

struct MemoryItemTool {
    spec: ToolSpec,
    action: Action,
    memory: Memory,
}

fn spec(action: Action) -> ToolSpec {
    let scope = json!({"type": "string", "enum": ["project", "agent", "user", "session"],
        "description": "project: shared by all agents; agent: yours; user: the person you are talking to; session: this conversation"});
    let kinds = json!({"type": "array", "items": {"type": "string", "enum": polpo_store::memory::MEMORY_KINDS}});
    let kind = json!({"type": "string", "enum": polpo_store::memory::MEMORY_KINDS});
    let (name, description, parameters) = match action {
        Action::Search => (
            MEMORY_ITEM_SEARCH,
            "Search remembered items by meaning and words; best matches first.",
            json!({"type": "object", "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": crate::MAX_QUERY_BYTES},
                "kinds": kinds, "scope": scope,
                "maxResults": {"type": "integer", "minimum": 1, "maximum": crate::MAX_RESULTS}},
              "required": ["query"], "additionalProperties": false}),
        ),
        Action::Create => (
            MEMORY_ITEM_CREATE,
            "Remember something: a fact, preference, style, open thread …",
            json!({"type": "object", "properties": {
                "kind": kind, "content": {"type": "string", "minLength": 1, "maxLength": polpo_store::memory::MAX_MEMORY_CONTENT},
                "scope": scope},
              "required": ["kind", "content"], "additionalProperties": false}),
        ),
        Action::Update => (
            MEMORY_ITEM_UPDATE,
            "Change a remembered item (pass expectedRevision to avoid overwriting a newer change).",
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "kind": kind,
                "content": {"type": "string", "minLength": 1, "maxLength": polpo_store::memory::MAX_MEMORY_CONTENT},
                "expectedRevision": {"type": "integer", "minimum": 1}},
              "required": ["id"], "additionalProperties": false}),
        ),
        Action::Delete => (
            MEMORY_ITEM_DELETE,
            "Forget a remembered item.",
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "expectedRevision": {"type": "integer", "minimum": 1}},
              "required": ["id"], "additionalProperties": false}),
        ),
        Action::List => (
            MEMORY_ITEM_LIST,
            "List remembered items, newest first; pass the returned cursor for more.",
            json!({"type": "object", "properties": {
                "kinds": kinds, "scope": scope,
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST}, "cursor": {"type": "string"}},
              "additionalProperties": false}),
        ),
    };
    ToolSpec { name: name.into(), description: description.into(), parameters }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    #[serde(default)]
    query: String,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    id: String,
    #[serde(default)]
    expected_revision: Option<u64>,
    #[serde(default)]
    max_results: Option<usize>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

/// The scopes this call may reach, from the trusted context.
struct Reach {
    agent: String,
    user: Option<String>,
    session: Option<String>,
}

impl Reach {
    fn of(ctx: &ToolContext) -> Self {
        let field =
            |name: &str| ctx.invocation.get(name).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        Reach { agent: ctx.agent.clone(), user: field("user"), session: field("sessionId") }
    }

    /// The scope the model named.
    fn scope(&self, name: &str) -> Result<MemoryScope, ToolError> {
        let missing =
            |what: &str| ToolError::new("memory_scope_unavailable", format!("this conversation has no {what}"));
        Ok(match name {
            "project" => MemoryScope::project(),
            "agent" => MemoryScope::of(ScopeKind::Agent, &self.agent),
            "user" => MemoryScope::of(ScopeKind::User, self.user.as_deref().ok_or_else(|| missing("user"))?),
            "session" => {
                MemoryScope::of(ScopeKind::Session, self.session.as_deref().ok_or_else(|| missing("session"))?)
            }
            other => return Err(ToolError::new("invalid_arguments", format!("unknown scope `{other}`"))),
        })
    }

    /// Every scope this call may reach.
    fn all(&self) -> Vec<MemoryScope> {
        let mut scopes = vec![MemoryScope::project(), MemoryScope::of(ScopeKind::Agent, &self.agent)];
        scopes.extend(self.user.iter().map(|u| MemoryScope::of(ScopeKind::User, u)));
        scopes.extend(self.session.iter().map(|s| MemoryScope::of(ScopeKind::Session, s)));
        scopes
    }

    fn filter(&self, scope: Option<&str>, kinds: Vec<String>) -> Result<MemoryFilter, ToolError> {
        let scopes = match scope {
            Some(name) => vec![self.scope(name)?],
            None => self.all(),
        };
        Ok(MemoryFilter { scopes, kinds })
    }
}

fn tool_error(e: MemoryError) -> ToolError {
    ToolError::new(e.code(), e.to_string())
}

fn output(value: Value) -> Result<ToolOutput, ToolError> {
    let text = serde_json::to_string(&value).map_err(|e| ToolError::new("internal", e.to_string()))?;
    Ok(ToolOutput { text, details: value })
}

fn brief(item: &MemoryItem) -> Value {
    json!({"id": item.id, "kind": item.kind, "scope": item.scope.kind.as_str(), "content": item.content,
           "revision": item.revision, "updatedAt": item.updated_at})
}

impl MemoryItemTool {
    /// The item `id` when this call may reach it; otherwise `not_found`, so nothing tells the
    /// model that another user's item exists.
    async fn reachable(&self, reach: &Reach, id: &str) -> Result<MemoryItem, ToolError> {
        let visible = MemoryFilter { scopes: reach.all(), kinds: Vec::new() };
        match self.memory.get(id).await.map_err(tool_error)? {
            Some(item) if visible.matches(&item) => Ok(item),
            _ => Err(ToolError::new("not_found", format!("memory item `{id}` not found"))),
        }
    }
}

#[async_trait::async_trait]
impl Tool for MemoryItemTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        match self.action {
            Action::Search | Action::List => ToolEffect::Read,
            Action::Update | Action::Delete => ToolEffect::Idempotent,
            Action::Create => ToolEffect::Write,
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: Args =
            serde_json::from_value(args).map_err(|e| ToolError::new("invalid_arguments", e.to_string()))?;
        let reach = Reach::of(ctx);
        match self.action {
            Action::Search => {
                let filter = reach.filter(args.scope.as_deref(), args.kinds)?;
                let request = SearchRequest { query: args.query, filter, max_results: args.max_results };
                let found = self.memory.search(&request).await.map_err(tool_error)?;
                let results: Vec<Value> = found.results.iter().map(|hit| brief(&hit.item)).collect();
                output(json!({"results": results, "warnings": found.warnings}))
            }
            Action::Create => {
                let scope = reach.scope(args.scope.as_deref().unwrap_or("agent"))?;
                let new = NewMemoryItem {
                    id: None,
                    scope,
                    kind: args.kind.unwrap_or_default(),
                    content: args.content.unwrap_or_default(),
                    source: format!("agent:{}", reach.agent),
                };
                let written = self.memory.create(new).await.map_err(tool_error)?;
                output(json!({"item": brief(&written.item), "warnings": written.warnings}))
            }
            Action::Update => {
                self.reachable(&reach, &args.id).await?;
                let patch = MemoryItemPatch { kind: args.kind, content: args.content, source: None };
                let written = self.memory.update(&args.id, patch, args.expected_revision).await.map_err(tool_error)?;
                output(json!({"item": brief(&written.item), "warnings": written.warnings}))
            }
            Action::Delete => {
                self.reachable(&reach, &args.id).await?;
                let forgotten = self.memory.delete(&args.id, args.expected_revision).await.map_err(tool_error)?;
                output(json!({"forgotten": forgotten, "itemId": args.id}))
            }
            Action::List => {
                let filter = reach.filter(args.scope.as_deref(), args.kinds)?;
                let limit = args.limit.unwrap_or(20).clamp(1, MAX_LIST);
                let page = PageRequest { after: args.cursor.map(polpo_store::Cursor::from_wire), limit };
                let page = self.memory.list_page(&filter, &page).await.map_err(tool_error)?;
                let items: Vec<Value> = page.items.iter().map(brief).collect();
                output(json!({"items": items, "nextCursor": page.next}))
            }
        }
    }
}

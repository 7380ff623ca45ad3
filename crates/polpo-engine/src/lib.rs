//! The Polpo runtime: resolves an agent, runs its turn loop (model → tools → model …) under
//! tool policy and hooks, and records everything a run does.

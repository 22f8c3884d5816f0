"""Constraints on the output: JSON schemas, grammars and tool calls, compiled by llguidance.

- compile.py: `Grammar`, what a constraint compiles to, and its limits;
- guide.py: `Guide`, one sequence's constraint while it generates: masks, forced tokens, rollback;
- tools.py: tool calls, per chat-template family: the prompt and the grammar;
- tool_parser.py: reading a tool-calling answer as it streams.

The rule that keeps the output exact (mask p and q alike, before the filters) is the engine's
and the maths' (decoding/engine.py, maths/masking.py). Left out: the vocabulary llguidance
reads (llama/model.LlamaModel.grammar_tokenizer).
"""

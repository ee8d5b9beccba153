//! Built-in demo weights for `eval --demo`.

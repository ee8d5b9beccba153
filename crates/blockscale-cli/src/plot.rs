//! The SVG plot of `eval --plot`.

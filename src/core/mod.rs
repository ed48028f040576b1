//! The task forest and its lifecycle, sans-IO.

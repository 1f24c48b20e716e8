//! What the benchmarks share.

/// The trivial pure program both benchmarks serve as tool `add`.
pub const PROGRAM: &str = r#"
def main(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b
"#;

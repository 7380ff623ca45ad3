//! The `polpo` command line.

fn main() {
    println!("polpo {}", env!("CARGO_PKG_VERSION"));
}

//! Prints the wire layout table that `README.md` holds (generated from the record
//! definitions): `cargo run -p memwatch-wire --example layout_table`.
fn main() {
    print!("{}", memwatch_wire::frame::layout_table());
}

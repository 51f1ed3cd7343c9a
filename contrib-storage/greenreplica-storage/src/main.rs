fn main() {
    println!("greenreplica-storage {}", greenreplica_storage::VERSION);
}

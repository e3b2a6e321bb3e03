fn main() {
    std::process::exit(kvmeter::cli::main_with(std::env::args_os().collect()));
}

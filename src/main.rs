fn main() {
    // The binary, not a test calling the library, can guard its run directories.
    kvmeter::report::current::guard_with_this_executable();
    std::process::exit(kvmeter::cli::main_with(std::env::args_os().collect()));
}

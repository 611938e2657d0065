#![no_main]
// See jointer::fuzzing::quantities for what this input surface is.
libfuzzer_sys::fuzz_target!(|data: &[u8]| jointer::fuzzing::quantities(data));

"""The tools around the runtime: the command line (`passepartout`), the benchmarks
(`passepartout bench`) and the tangler of org/ into the code (`passepartout tangle`)."""

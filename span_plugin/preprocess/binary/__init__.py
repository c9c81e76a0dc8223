"""fairseq's binary files written with numpy alone: indexed token files, the parallel
span-index files, label files and the dict.txt reader they are encoded with."""

// A whole file read into memory, or an ember::Error that names the file and why it failed:
//
//   read_whole_file("run/metrics.csv", "report")
//     -> "report: cannot open 'run/metrics.csv': No such file or directory"
//
// A read that fails partway (an I/O error, a directory) throws too ("cannot read"), so that a
// caller never takes the part it got for the whole file and writes it back.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// The bytes of the file at `path`; `who` starts the message of an error ("load_checkpoint").
std::string read_whole_file(const std::string& path, std::string_view who);

}  // namespace ember

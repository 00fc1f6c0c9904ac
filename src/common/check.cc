#include "common/check.h"

namespace gradsync::detail {

void checkFailed(const char* file, int line, const std::string& message) {
  throw InternalError(fmt::format("check failed at {}:{}: {}", file, line, message),
                      {.hint = "this is a bug in gradsync; please report it with this message"});
}

}  // namespace gradsync::detail

// EXPECT_ERROR_WITH(statement, "part", ...): the statement must throw an ember::Error whose
// message contains every one of the parts (a user-facing error must say what was wrong).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

#define EXPECT_ERROR_WITH(statement, ...)                                \
  do {                                                                   \
    try {                                                                \
      (void)(statement);                                                 \
      ADD_FAILURE() << "expected an error from " #statement;             \
    } catch (const ::ember::Error& error) {                              \
      const std::string message = error.what();                          \
      for (const char* part : {__VA_ARGS__}) {                           \
        EXPECT_NE(message.find(part), std::string::npos)                 \
            << "message \"" << message << "\" lacks \"" << part << "\""; \
      }                                                                  \
    }                                                                    \
  } while (false)

// The single GoogleTest main of the unit tests.  (When unit tests need a Python
// interpreter, this main is where it is initialised, once.)
#include <gtest/gtest.h>

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

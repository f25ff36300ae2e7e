// D = (A B) C (PolyBench 2mm, integer): the second product reads what the first wrote
func.func @mm2(%A: memref<@N@x@N@xi32>, %B: memref<@N@x@N@xi32>, %C: memref<@N@x@N@xi32>, %T: memref<@N@x@N@xi32>, %D: memref<@N@x@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %n step %c1 {
      %s = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %z) -> (i32) {
        %a = memref.load %A[%i, %k] : memref<@N@x@N@xi32>
        %b = memref.load %B[%k, %j] : memref<@N@x@N@xi32>
        %p = arith.muli %a, %b : i32
        %t = arith.addi %acc, %p : i32
        scf.yield %t : i32
      }
      memref.store %s, %T[%i, %j] : memref<@N@x@N@xi32>
    }
  }
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %n step %c1 {
      %s = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %z) -> (i32) {
        %a = memref.load %T[%i, %k] : memref<@N@x@N@xi32>
        %b = memref.load %C[%k, %j] : memref<@N@x@N@xi32>
        %p = arith.muli %a, %b : i32
        %t = arith.addi %acc, %p : i32
        scf.yield %t : i32
      }
      memref.store %s, %D[%i, %j] : memref<@N@x@N@xi32>
    }
  }
  func.return
}

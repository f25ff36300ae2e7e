// two Jacobi-1D sweeps per time step (PolyBench jacobi-1d, integer average)
func.func @jacobi1d(%a: memref<@N@xi32>, %b: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = arith.constant @N@ : index
  %three = arith.constant 3 : i32
  %last = arith.subi %n, %c1 : index
  scf.for %t = %c0 to %c2 step %c1 {
    scf.for %i = %c1 to %last step %c1 {
      %im = arith.subi %i, %c1 : index
      %ip = arith.addi %i, %c1 : index
      %l = memref.load %a[%im] : memref<@N@xi32>
      %m = memref.load %a[%i] : memref<@N@xi32>
      %r = memref.load %a[%ip] : memref<@N@xi32>
      %s1 = arith.addi %l, %m : i32
      %s2 = arith.addi %s1, %r : i32
      %v = arith.divsi %s2, %three : i32
      memref.store %v, %b[%i] : memref<@N@xi32>
    }
    scf.for %i = %c1 to %last step %c1 {
      %im = arith.subi %i, %c1 : index
      %ip = arith.addi %i, %c1 : index
      %l = memref.load %b[%im] : memref<@N@xi32>
      %m = memref.load %b[%i] : memref<@N@xi32>
      %r = memref.load %b[%ip] : memref<@N@xi32>
      %s1 = arith.addi %l, %m : i32
      %s2 = arith.addi %s1, %r : i32
      %v = arith.divsi %s2, %three : i32
      memref.store %v, %a[%i] : memref<@N@xi32>
    }
  }
  func.return
}

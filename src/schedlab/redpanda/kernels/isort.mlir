// in-place insertion sort (control-rich and memory-irregular: shifts depend on the data)
func.func @isort(%a: memref<@NN@xi32>) {
  %c1 = arith.constant 1 : index
  %n = arith.constant @NN@ : index
  %zero = arith.constant 0 : index
  %true = arith.constant true
  %false = arith.constant false
  scf.for %i = %c1 to %n step %c1 {
    %key = memref.load %a[%i] : memref<@NN@xi32>
    %res:2 = scf.while (%j = %i, %go = %true) : (index, i1) -> (index, i1) {
      %pos = arith.cmpi sgt, %j, %zero : index
      %both = arith.andi %pos, %go : i1
      scf.condition(%both) %j, %go : index, i1
    } do {
    ^bb0(%jj: index, %g: i1):
      %jm = arith.subi %jj, %c1 : index
      %prev = memref.load %a[%jm] : memref<@NN@xi32>
      %bigger = arith.cmpi sgt, %prev, %key : i32
      %next:2 = scf.if %bigger -> (index, i1) {
        memref.store %prev, %a[%jj] : memref<@NN@xi32>
        scf.yield %jm, %true : index, i1
      } else {
        scf.yield %jj, %false : index, i1
      }
      scf.yield %next#0, %next#1 : index, i1
    }
    memref.store %key, %a[%res#0] : memref<@NN@xi32>
  }
  func.return
}

